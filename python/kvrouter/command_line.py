"""``RouterArgs`` -> the ``router`` command line (sgl-router's own flag names).

``--host`` and ``--port`` are always given (sgl-router binds 0.0.0.0:30000 by default, the
``router`` binary 127.0.0.1); every other ``PASS`` field is given only when it differs from its
sgl-router default, so the router's defaults (the peers' unless docs/migration.md says why not)
apply to the rest and the router warns only about flags that were set. ``DROP`` fields that are
set give one warning each here. Scalars are written ``--flag=value`` (a negative value stays a
value); lists as ``--flag v1 v2``.
"""

from typing import Any, List, Tuple

from kvrouter.fields import DROP, FIELDS
from kvrouter.router_args import unknown_fields

ALWAYS = ("host", "port")


def _flag(f: Any) -> str:
    return f"--{f.stem}"


def _values(name: str, value: Any) -> List[str]:
    if name == "control_plane_api_keys":
        # (id, name, key, role) -> sgl-router's id:name:role:key
        return [f"{k[0]}:{k[1]}:{k[3]}:{k[2]}" for k in value]
    if isinstance(value, dict):
        return [f"{k}={v}" for k, v in value.items()]
    return [str(v) for v in value]


def to_argv(args: Any) -> Tuple[List[str], List[str]]:
    """(the ``router`` arguments for ``args``, warnings about what they leave out)."""
    argv: List[str] = []
    warnings: List[str] = []
    already = getattr(args, "_warned", set())
    for key in unknown_fields(args):
        if key not in already:
            warnings.append(
                f"RouterArgs.{key} is not an sgl-router 0.3.2 RouterArgs field; kvrouter ignores it"
            )
    for f in FIELDS:
        value = getattr(args, f.name, f.default)
        if f.name not in ALWAYS and (value == f.default or value is None):
            continue
        if f.to == DROP:
            warnings.append(
                f"RouterArgs.{f.name}={value!r} has no kvrouter equivalent and is dropped "
                "(docs/migration.md)"
            )
            continue
        if f.switch:
            if value:
                argv.append(_flag(f))
        elif isinstance(value, (list, tuple, dict)):
            if value:
                argv += [_flag(f), *_values(f.name, value)]
        else:
            argv.append(f"{_flag(f)}={value}")
    return argv, warnings
