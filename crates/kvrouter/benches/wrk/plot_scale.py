"""The scale figures: scale.sh's summary.txt into docs/results/scale-workers.json and
scale-prompt.json (router CPU per request by fleet size and by prompt length, per mode), and
docs/img/scale-router-cpu.png drawn from those results files and from
docs/results/decision-scale.json (one KV decision in process, full scan against the candidate
set; benches/fleet/report.py writes it). Then `python3 scripts/compare/docs.py` renders the
tables into docs/benchmarks.md.

usage: python3 crates/kvrouter/benches/wrk/plot_scale.py [--summary OUT/summary.txt]
           [--results docs/results] [--png docs/img/scale-router-cpu.png]
Without --summary it only redraws the chart from the results files. Needs matplotlib.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
from pathlib import Path

SIZES = [8, 64, 512, 1000]
PROMPTS = [1024, 8192, 32768, 131072]
MODES = {"least-load": "least-load", "kv": "KV"}
COMMAND = "BIN=target/release OUT=target/scale crates/kvrouter/benches/wrk/scale.sh"


def parse(path: Path) -> list[dict[str, str]]:
    rows = []
    for line in path.read_text().splitlines():
        kv = dict(p.split("=", 1) for p in line.split() if "=" in p)
        if "router_cpu_us_per_req" in kv:
            rows.append(kv)
    return rows


def _fmt(us: float) -> str:
    return f"{us:,.0f}" if us >= 1000 else f"{us:.1f}"


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def tables(rows: list[dict[str, str]]) -> tuple[dict, dict]:
    """The two results files (kind "table") from summary lines; a later line wins a point."""
    by_workers: dict[str, dict[int, float]] = {m: {} for m in MODES}
    by_prompt: dict[str, dict[int, float]] = {m: {} for m in MODES}
    loads = []
    for r in rows:
        if r["mode"] not in MODES:
            continue
        us = float(r["router_cpu_us_per_req"])
        loads.append(float(r.get("load", "0").split()[0] or 0))
        if r.get("prompt") == "32":
            by_workers[r["mode"]][int(r["workers"])] = us
        elif r.get("workers") == "8":
            by_prompt[r["mode"]][int(r["prompt"])] = us
    stamp = {
        "command": COMMAND,
        "commit": _commit(),
        "commit_note": "the commit measured",
        "date": datetime.date.today().isoformat(),
    }
    load = f"load average {min(loads, default=0):.1f}-{max(loads, default=0):.1f}"

    def table(name, head, keys, pts, labels, cond):
        return {
            "kind": "table",
            "name": name,
            **stamp,
            "conditions": cond,
            "columns": [head, *labels],
            "align": ["", *["r"] * len(keys)],
            "rows": [
                [f"{MODES[m]}, µs per request", *[_fmt(pts[m][k]) if k in pts[m] else "-" for k in keys]]
                for m in MODES
            ],
        }

    workers = table(
        "scale-workers", "workers (32-token prompts)", SIZES, by_workers,
        [f"{n:,}" for n in SIZES], f"6 s per point, {load}",
    )
    prompt = table(
        "scale-prompt", "prompt tokens (8 workers)", PROMPTS, by_prompt,
        [f"{n // 1024}k" for n in PROMPTS],
        f"6 s per point, {load}; 8 real mocks with KV events, 8 connections",
    )
    return workers, prompt


def _series(res: dict, keys: list[int]) -> dict[str, list[tuple[int, float]]]:
    out = {}
    for row in res["rows"]:
        mode = row[0].split(",")[0]
        out[mode] = [(k, float(v.replace(",", ""))) for k, v in zip(keys, row[1:]) if v != "-"]
    return out


def draw(results: Path, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workers = json.loads((results / "scale-workers.json").read_text())
    prompt = json.loads((results / "scale-prompt.json").read_text())
    decision = json.loads((results / "decision-scale.json").read_text())
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(15, 4))
    for mode, pts in _series(workers, SIZES).items():
        a.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=mode)
    a.set_xscale("log")
    a.set_xlabel("workers (32-token prompts, 32 connections)")
    a.set_ylabel("router CPU per request (µs)")
    a.set_title(f"proxied request by fleet size ({workers['commit']}, {workers['date']})")
    a.legend()
    for mode, pts in _series(prompt, PROMPTS).items():
        b.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=mode)
    b.set_xscale("log")
    b.set_yscale("log")
    b.set_xlabel("prompt tokens (8 workers, 8 connections)")
    b.set_title(f"proxied request by prompt length ({prompt['commit']})")
    b.legend()
    labels = {"full_scan": "every unit read (full scan)", "candidates": "candidate set (default)"}
    for key, label in labels.items():
        pts = sorted((int(n), us) for n, us in decision[key].items())
        c.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    c.set_xscale("log")
    c.set_xlabel("workers")
    c.set_ylabel("µs per KV decision (in process)")
    c.set_title(f"one KV decision ({decision['commit']}, {decision['date']})")
    c.legend()
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--summary", type=Path, help="scale.sh's summary.txt (else only redraw)")
    ap.add_argument("--results", type=Path, default=Path("docs/results"))
    ap.add_argument("--png", type=Path, default=Path("docs/img/scale-router-cpu.png"))
    args = ap.parse_args()
    if args.summary:
        for res in tables(parse(args.summary)):
            (args.results / f"{res['name']}.json").write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n")
    draw(args.results, args.png)


if __name__ == "__main__":
    main()
