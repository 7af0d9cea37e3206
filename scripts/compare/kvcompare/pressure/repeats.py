"""Repeated pressure runs folded into one table: per (timing model, case, router) the median and
range of hit rate, TTFT p50 and TTFT p99 over every run, and the median's ratio to a baseline
router's. One run of a case is a draw from a noisy process (a 2-core machine, chaotic
placement); a difference between two routers counts when it survives the range of repeats.

    python3 scripts/compare/compare.py pressure-repeats OUT1/pressure.json OUT2/pressure.json ... \
        --repeats-name pressure-predictions-repeats --repeats-baseline "kvrouter kv no-predict"

writes docs/results/<name>.json (kind "table", rendered by kvcompare/tables.py into the block
`<name>` of docs/benchmarks.md). Standard library only."""

from __future__ import annotations

import statistics
from pathlib import Path

from .. import tables


def _key(run: dict) -> tuple[str, str, str]:
    return run["timing_model"], run["case"], run["router"]


def collect(results: list[dict]) -> dict[tuple[str, str, str], list[dict]]:
    """Every completed run's summary by (timing model, case, router), in file order."""
    out: dict[tuple[str, str, str], list[dict]] = {}
    for res in results:
        for run in res.get("runs", []):
            if run.get("summary"):
                out.setdefault(_key(run), []).append(run["summary"])
    return out


def _spread(values: list[float], fmt: str) -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def rows(groups: dict[tuple[str, str, str], list[dict]], baseline: str) -> list[list[str]]:
    """One row per (timing model, case, router): runs, medians (ranges), ratios to `baseline`."""
    out = []
    for (model, case, router), runs in sorted(groups.items()):
        hit = [100 * s["hit_rate"] for s in runs]
        p50 = [s["ttft_p50_ms"] for s in runs]
        p99 = [s["ttft_p99_ms"] for s in runs]
        base = groups.get((model, case, baseline))
        if base and router != baseline:
            bhit = statistics.median(100 * s["hit_rate"] for s in base)
            vs = (f"{statistics.median(hit) - bhit:+.1f} points, p50 "
                  f"{_ratio(statistics.median(p50), statistics.median(s['ttft_p50_ms'] for s in base))}, p99 "
                  f"{_ratio(statistics.median(p99), statistics.median(s['ttft_p99_ms'] for s in base))}")
        else:
            vs = "-"
        out.append([f"{case} ({model})", router, str(len(runs)), _spread(hit, "{:.1f}%"),
                    _spread(p50, "{:.0f}"), _spread(p99, "{:.0f}"), vs])
    return out


def table(results: list[dict], name: str, baseline: str, date: str, commit: str,
          conditions: str) -> dict:
    """The kind-"table" results file of `results` (pressure.json contents)."""
    commands = list(dict.fromkeys(r["meta"]["command"] for r in results))
    return {
        "kind": tables.KIND,
        "name": name,
        "command": commands,
        "commit": commit,
        "date": date,
        "conditions": conditions,
        "columns": ["case", "router", "runs", "hit rate, median (min-max)", "TTFT p50 ms",
                    "TTFT p99 ms", f"median vs {baseline}"],
        "align": ["", "", "r", "r", "r", "r", ""],
        "rows": rows(collect(results), baseline),
        "notes": "Runs interleaved (each command measures every router once, in turn); simulated "
                 "time. Ratios are of medians.",
    }


def write(results: list[dict], out: Path, **kw) -> dict:
    import json
    res = table(results, **kw)
    out.write_text(json.dumps(res, indent=1) + "\n")
    return res
