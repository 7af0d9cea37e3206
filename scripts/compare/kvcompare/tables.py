"""Tables of docs/benchmarks.md that no harness writes itself (criterion runs, wrk scripts,
one-off probes): each is a results file `docs/results/<name>.json` of kind "table", rendered
into the block between `<!-- <name>:begin -->` and `<!-- <name>:end -->`, stamped with the
command that produced it, the commit it ran at and the date. Standard library only.

A results file:

    {"kind": "table", "name": "mock-throughput",
     "command": "wrk -t1 -c32 ...",            # or a list of commands, run in that order
     "commit": "1a0c477",                      # the checkout that was measured
     "commit_note": "...",                     # optional: how the commit is known
     "date": "2026-11-29",
     "conditions": "shared 2-core machine, load average ~14",   # optional
     "columns": ["workload", "requests", ...],
     "align": ["", "r", ...],                  # optional: "r" right-aligns a column
     "rows": [["/generate ...", "64,609", ...], ...],
     "notes": "..."}                           # optional: a line under the table

Cells are kept as the measurement reported them (with their units and ranges), so the block
re-renders byte for byte; `scripts/compare/docs.py` regenerates every block from these files."""

from __future__ import annotations

import json
from pathlib import Path

KIND = "table"


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def load(path: Path) -> dict:
    res = json.loads(path.read_text())
    if res.get("kind") != KIND:
        raise ValueError(f"{path}: not a table results file (kind {res.get('kind')!r})")
    return res


def stamp(res: dict) -> str:
    """`command` at `commit`, date; conditions."""
    cmds = res["command"] if isinstance(res["command"], list) else [res["command"]]
    text = " then ".join(f"`{c}`" for c in cmds)
    text += f" at `{res['commit']}`"
    if res.get("commit_note"):
        text += f" ({res['commit_note']})"
    text += f", {res['date']}"
    if res.get("conditions"):
        text += f"; {res['conditions']}"
    return text + "."


def table(res: dict) -> str:
    cols = res["columns"]
    align = res.get("align") or [""] * len(cols)
    lines = ["| " + " | ".join(cols) + " |",
             "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    for row in res["rows"]:
        if len(row) != len(cols):
            raise ValueError(f"{res.get('name')}: row {row[:1]} has {len(row)} cells, {len(cols)} columns")
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


def render(res: dict) -> str:
    """The block's body (without the markers)."""
    parts = [stamp(res), "", table(res)]
    if res.get("notes"):
        parts += ["", res["notes"]]
    return "\n".join(parts)


def replace_block(doc: str, name: str, body: str) -> str:
    begin, end = markers(name)
    if begin not in doc or end not in doc:
        raise ValueError(f"no {begin} ... {end} block")
    pre, rest = doc.split(begin, 1)
    return pre + begin + "\n" + body.rstrip("\n") + "\n" + end + rest.split(end, 1)[1]
