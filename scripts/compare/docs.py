#!/usr/bin/env python3
"""Regenerates every generated block of docs/benchmarks.md and README.md from the results files
committed in docs/results/, without measuring anything. Standard library only.

    python3 scripts/compare/docs.py            # rewrite the blocks in place
    python3 scripts/compare/docs.py --check    # exit 1 naming each block that differs
    python3 scripts/compare/compare.py docs    # the same, through the harness's entry point

Blocks and what renders them (the measuring commands that write each results file are in the
block's own stamp and in docs/compare.md):

- `side-by-side`: docs/results/compare-full.json + compare-overhead.json (kvcompare/report.py)
- `pressure`: docs/results/pressure-full.json (kvcompare/pressure/render.py)
- `pressure-predictions`: docs/results/pressure-predictions.json (the same renderer, issue 28's
  targets only)
- `pd`: docs/results/pd-full.json (kvcompare/pressure/pd.py)
- `decision-scale`: docs/results/decision-scale.json (crates/kvrouter/benches/fleet/report.py)
- `faults`: docs/results/faults-full.json; `faults-issue25`: docs/results/faults-issue25.json
  (scripts/faults/kvfaults/report.py for a fault-suite results file; kvcompare/tables.py for
  a table of kind "table")
- every other `<name>` block: docs/results/<name>.json of kind "table" (kvcompare/tables.py)
- README.md's `readme-figures` block: scripts/compare/readme_figures.py

scripts/compare/test_docs.py fails when a committed block differs from what this renders."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
RESULTS = REPO / "docs" / "results"
BENCHMARKS = REPO / "docs" / "benchmarks.md"
README = REPO / "README.md"

import readme_figures  # noqa: E402
from kvcompare import report, tables  # noqa: E402
from kvcompare.pressure import pd as pressure_pd  # noqa: E402
from kvcompare.pressure import render as pressure_render  # noqa: E402
from kvcompare.pressure import targets as pressure_targets  # noqa: E402

# A block's begin marker opens its line (a marker quoted in prose is not a block).
_BLOCK = re.compile(r"^<!-- ([a-z0-9][a-z0-9-]*):begin\b[^>]*-->", re.M)


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def side_by_side() -> str:
    res = report.merge([report.load(RESULTS / "compare-full.json"), report.load(RESULTS / "compare-overhead.json")])
    return report.markdown(res, "img")


def pressure() -> str:
    return pressure_render.markdown(pressure_render.merge([report.load(RESULTS / "pressure-full.json")]), "img")


def pressure_predictions() -> str:
    """Issue 28: predictions full / learned / off side by side, with its targets only."""
    res = pressure_render.merge([report.load(RESULTS / "pressure-predictions.json")])
    return pressure_render.markdown(res, None, pressure_targets.PREDICTION_TARGETS)


def pd() -> str:
    return pressure_pd.markdown(pressure_pd.merge([report.load(RESULTS / "pd-full.json")]))


def decision_scale() -> str:
    fleet = _module(REPO / "crates" / "kvrouter" / "benches" / "fleet" / "report.py", "fleet_report")
    full = fleet.render(json.loads((RESULTS / "decision-scale.json").read_text()))
    return full.split(fleet.BEGIN, 1)[1].split(fleet.END, 1)[0].strip("\n")


def fault_suite(name: str) -> str:
    """A fault-suite block: faults.py's own results file ({"meta", "cases"}) rendered by its
    report module, or a table results file for a run whose structured results were not kept."""
    res = json.loads((RESULTS / f"{name}.json").read_text())
    if res.get("kind") == tables.KIND:
        return tables.render(res)
    kvfaults = _module(REPO / "scripts" / "faults" / "kvfaults" / "report.py", "kvfaults_report")
    meta = res["meta"]
    head = (f"`{meta['command']}` at `{meta['git']}`, {meta['started']}; {meta['machine']}, binaries: "
            f"{meta['binaries']}, load average (1 min) {meta['loadavg_1m_start']} at start, "
            f"{meta['loadavg_1m_end']} at end.")
    return head + "\n\n" + kvfaults.table(res["cases"])


SPECIAL = {
    "side-by-side": side_by_side,
    "pressure": pressure,
    "pressure-predictions": pressure_predictions,
    "pd": pd,
    "decision-scale": decision_scale,
    "faults": lambda: fault_suite("faults-full"),
    "faults-issue25": lambda: fault_suite("faults-issue25"),
}


def block_names(doc: str) -> list[str]:
    return _BLOCK.findall(doc)


def render_block(name: str) -> str:
    """The body of block `name` of docs/benchmarks.md as its results file renders it today."""
    if name in SPECIAL:
        return SPECIAL[name]().rstrip("\n")
    path = RESULTS / f"{name}.json"
    if not path.exists():
        raise SystemExit(f"docs/benchmarks.md block {name!r} has no results file {path.relative_to(REPO)}")
    return tables.render(tables.load(path)).rstrip("\n")


def _replace(doc: str, name: str, body: str) -> str:
    m = re.search(r"^<!-- " + re.escape(name) + r":begin\b[^>]*-->", doc, re.M)
    end = f"<!-- {name}:end -->"
    pre, rest = doc[:m.end()], doc[m.end():]
    return pre + "\n" + body + "\n" + end + rest.split(end, 1)[1]


def render_benchmarks(doc: str) -> str:
    for name in block_names(doc):
        doc = _replace(doc, name, render_block(name))
    return doc


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 when a committed block differs from its results")
    a = ap.parse_args(argv)
    changed = []
    for path, render in ((BENCHMARKS, render_benchmarks), (README, readme_figures.render)):
        now = path.read_text()
        want = render(now)
        if now != want:
            changed.append(path.relative_to(REPO))
            if not a.check:
                path.write_text(want)
    if a.check and changed:
        print("generated blocks differ from docs/results/ in: " + ", ".join(map(str, changed))
              + "; run python3 scripts/compare/docs.py")
        return 1
    print(("regenerated: " + ", ".join(map(str, changed))) if changed else "every generated block is current")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
