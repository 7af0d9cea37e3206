"""``RouterArgs``: sgl-router 0.3.2's launch configuration, field for field.

The same field names and defaults as ``sglang_router.router_args.RouterArgs`` (declared in
``fields.py``), the same ``add_cli_args(parser, use_router_prefix=..., exclude_host_port=...)``
flags and ``from_cli_args(args, use_router_prefix=...)`` parsing, so a framework that builds its
router configuration this way (miles, slime) builds it unchanged. Unlike sgl-router, a keyword
that is not a field is warned about and kept, not a ``TypeError``: code written for another
sgl-router version still starts. ``launch_router.py`` turns it into a ``router`` command line.
"""

import argparse
import copy
import dataclasses
import logging
from typing import Any, Dict, List, Optional

from kvrouter.fields import FIELDS

logger = logging.getLogger("kvrouter")

__all__ = ["RouterArgs"]


def _init(self: Any, **kwargs: Any) -> None:
    for f in FIELDS:
        setattr(self, f.name, copy.deepcopy(f.default))
    unknown = []
    for key, value in kwargs.items():
        if key not in _NAMES:
            unknown.append(key)
        setattr(self, key, value)
    object.__setattr__(self, "_warned", set(unknown))
    for key in unknown:
        logger.warning(
            "RouterArgs: %r is not an sgl-router 0.3.2 RouterArgs field; kvrouter ignores it", key
        )


def unknown_fields(args: Any) -> List[str]:
    """Attributes of ``args`` that are not RouterArgs fields (set after construction too)."""
    return [k for k in vars(args) if not k.startswith("_") and k not in _NAMES]


def add_cli_args(
    parser: argparse.ArgumentParser,
    use_router_prefix: bool = False,
    exclude_host_port: bool = False,
) -> None:
    """Adds sgl-router's flags to ``parser`` (``--router-<name>`` with ``use_router_prefix``;
    ``--host``, ``--port`` and ``--worker-urls`` are never prefixed)."""
    prefix = "router-" if use_router_prefix else ""
    group = parser.add_argument_group("Router (kvrouter)", "sgl-router 0.3.2 RouterArgs flags")
    for f in FIELDS:
        if not f.cli or (exclude_host_port and f.name in ("host", "port")):
            continue
        flag = f"--{prefix if f.prefixed else ''}{f.stem}"
        kw: Dict[str, Any] = {"default": f.argparse_default()}
        if f.switch:
            kw["action"] = "store_true"
        else:
            kw["type"] = f.type
            if f.nargs is not None:
                kw["nargs"] = f.nargs
            if f.choices is not None:
                kw["choices"] = list(f.choices)
            if f.append:
                kw["action"] = "append"
        group.add_argument(flag, **kw)


def from_cli_args(cls: type, args: argparse.Namespace, use_router_prefix: bool = False) -> Any:
    """A ``cls`` from a parsed namespace, as sgl-router 0.3.2 reads it: each field from
    ``router_<dest>`` (with the prefix) or ``<dest>``; ``--prefill``/``--decode``, selectors,
    control-plane keys and the JWT role mapping parsed into their field shapes."""
    prefix = "router_" if use_router_prefix else ""
    given = vars(args)
    values: Dict[str, Any] = {}
    for f in FIELDS:
        if not f.cli:
            continue
        for key in (f"{prefix}{f.dest}", f.dest, f"{prefix}{f.name}", f.name):
            if key in given:
                values[f.name] = given[key]
                break
    values["prefill_urls"] = _prefill_urls(given.get(f"{prefix}prefill"))
    values["decode_urls"] = [u[0] for u in given.get(f"{prefix}decode") or []]
    for name in ("selector", "prefill_selector", "decode_selector"):
        values[name] = _selector(given.get(f"{prefix}{name}"))
    values["control_plane_api_keys"] = _api_keys(given.get(f"{prefix}control_plane_api_keys"))
    values["jwt_role_mapping"] = _role_mapping(given.get(f"{prefix}jwt_role_mapping"))
    return cls(**values)


def _prefill_urls(items: Optional[List[List[str]]]) -> List[tuple]:
    out = []
    for item in items or []:
        port: Optional[int] = None
        if len(item) >= 2 and item[1].lower() != "none":
            try:
                port = int(item[1])
            except ValueError:
                raise ValueError(
                    f"Invalid bootstrap port: {item[1]}. Must be a number or 'none'"
                ) from None
        out.append((item[0], port))
    return out


def _selector(items: Any) -> Dict[str, str]:
    if not items:
        return {}
    if isinstance(items, dict):
        return dict(items)
    if len(items) == 1 and " " in items[0]:
        items = items[0].split(" ")
    return dict(i.split("=", 1) for i in items if "=" in i)


def _api_keys(items: Optional[List[str]]) -> List[tuple]:
    out = []
    for item in items or []:
        parts = item.split(":", 3)
        if len(parts) != 4:
            raise ValueError(f"Invalid API key format: '{item}'. Expected 'id:name:role:key'")
        key_id, name, role, key = parts
        if role.lower() not in ("admin", "user"):
            raise ValueError(f"Invalid role: '{role}'. Must be 'admin' or 'user'")
        out.append((key_id, name, key, role.lower()))
    return out


def _role_mapping(items: Optional[List[str]]) -> Dict[str, str]:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(
                f"Invalid role mapping format: '{item}'. Expected 'idp_role=gateway_role'"
            )
        idp, role = item.split("=", 1)
        if role.lower() not in ("admin", "user"):
            raise ValueError(f"Invalid gateway role: '{role}'. Must be 'admin' or 'user'")
        out[idp] = role.lower()
    return out


_NAMES = {f.name for f in FIELDS}

RouterArgs = dataclasses.make_dataclass(
    "RouterArgs",
    [
        (
            f.name,
            Any,
            dataclasses.field(default_factory=lambda d=f.default: copy.deepcopy(d)),
        )
        for f in FIELDS
    ],
    init=False,
    namespace={
        "__init__": _init,
        "__doc__": "sgl-router 0.3.2's RouterArgs: the same fields and defaults (kvrouter.fields).",
        "add_cli_args": staticmethod(add_cli_args),
        "from_cli_args": classmethod(from_cli_args),
    },
)
RouterArgs.__module__ = __name__
