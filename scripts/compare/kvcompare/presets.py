"""The loadgen workload presets (workloads/presets.toml, shared with `loadgen demo`): a preset's
loadgen argv, and each harness's table of where it runs them (fleets, capacities, sizes)."""

from __future__ import annotations

import functools
import json
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent.parent
PATH = REPO / "workloads" / "presets.toml"
# Every loadgen command line the presets give the Python harnesses, as checked by their tests.
COMMANDS = REPO / "workloads" / "commands.json"
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


@functools.cache
def table() -> dict:
    with open(PATH, "rb") as f:
        return tomllib.load(f)


def preset(name: str) -> dict:
    try:
        return table()["preset"][name]
    except KeyError:
        raise KeyError(f"no preset {name!r} in {PATH}") from None


def argv(name: str, **values) -> list[str]:
    """Preset `name` as loadgen's argv: its subcommand, then its flags with every `{key}` filled
    from `values` (str() of each), else from the preset's `defaults`."""
    p = preset(name)
    fill = {**p.get("defaults", {}), **{k: str(v) for k, v in values.items()}}

    def one(arg: str) -> str:
        def sub(m: re.Match) -> str:
            if m.group(1) not in fill:
                raise KeyError(f"preset {name!r}: no value for {{{m.group(1)}}}")
            return fill[m.group(1)]
        return _PLACEHOLDER.sub(sub, arg)
    return [p["workload"], *(one(a) for a in p["args"])]


def flag(name: str, flag_name: str, **values) -> str:
    """The value of `flag_name` in preset `name`'s argv (filled as `argv` fills it)."""
    a = argv(name, **values)
    return a[a.index(flag_name) + 1]


def suite(*path: str) -> dict:
    """A harness's table, e.g. suite("pressure", "full")."""
    t = table()
    for key in path:
        t = t[key]
    return t


def replicas_argv() -> list[str]:
    """scripts/replicas/replicas.py's default workload (`[replicas]`): streaming /generate."""
    t = suite("replicas")
    return [*argv(t["preset"]), "--stream", "--endpoint", "generate", "--seed", str(t["seed"]), "--no-logprob",
            "--max-duration-secs", str(t["max_duration_secs"])]


# --- workloads/commands.json (the tests' record of every command line) ------------------------

def commands(prefixes: tuple[str, ...]) -> dict:
    """The recorded entries whose key starts with one of `prefixes`."""
    return {k: v for k, v in json.loads(COMMANDS.read_text()).items() if k.startswith(prefixes)}


def update_commands(prefixes: tuple[str, ...], new: dict) -> None:
    """Replaces the entries under `prefixes` with `new` (KVROUTER_UPDATE_COMMANDS=1 in the tests)."""
    kept = {k: v for k, v in json.loads(COMMANDS.read_text()).items() if not k.startswith(prefixes)}
    COMMANDS.write_text(json.dumps({**kept, **new}, indent=1, sort_keys=True) + "\n")


def typed(x):
    """JSON with its number types kept apart (20 and 20.0 print differently in a command line)."""
    if isinstance(x, dict):
        return {k: typed(v) for k, v in x.items()}
    if isinstance(x, list):
        return [typed(v) for v in x]
    return (type(x).__name__, x)
