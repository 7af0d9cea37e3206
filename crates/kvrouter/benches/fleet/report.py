#!/usr/bin/env python3
"""Decision cost by fleet size: reads criterion's estimates of routing_path's kv_fleet_* cases
(the full scan and the candidate set, run side by side) into docs/results/decision-scale.json
and renders the table between the markers in docs/benchmarks.md.

With `--instructions BIN` (the `fleet_instructions` bench binary, built by
`cargo bench -p kvrouter --bench fleet_instructions --no-run`) it also counts instructions per
decision under callgrind (valgrind), which other load on the machine does not move.

usage: cargo bench -p kvrouter --bench routing_path -- kv_fleet
       python3 crates/kvrouter/benches/fleet/report.py [--criterion target/criterion]
           [--instructions target/release/deps/fleet_instructions-<hash>] [--decisions 5000]
           [--out docs/results/decision-scale.json] [--update-docs]
"""
import argparse
import datetime
import json
import pathlib
import re
import subprocess

SIZES = [8, 64, 512, 1000]
BEGIN = "<!-- decision-scale:begin -->"
END = "<!-- decision-scale:end -->"


def median_us(path):
    est = json.loads(path.read_text())
    return est["median"]["point_estimate"] / 1000.0


VARIANTS = {"full_scan": "every unit read (full scan)", "candidates": "candidate set (default)"}


def collect(root, variant):
    return {
        str(n): median_us(root / f"routing_path/kv_fleet_{variant}_{n}_workers/new/estimates.json")
        for n in SIZES
    }


def callgrind_ir(binary, args):
    """Instructions callgrind counts for one run of `binary args`."""
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                          binary, *args], capture_output=True, text=True, check=True).stderr
    return int(re.search(r"Collected : (\d+)", out).group(1))


def decisions_counted(variant, n, decisions):
    """Decisions counted at size `n`: a tenth (at least 200) for the full scan past 64 workers,
    whose decisions cost up to 20x the candidate set's under callgrind."""
    return decisions if variant == "candidates" or n <= 64 else max(decisions // 10, 200)


def instructions(binary, variant, decisions):
    """Instructions per decision at every size: a run of `decisions` minus a run of none."""
    extra = ["full"] if variant == "full_scan" else []
    per = {}
    for n in SIZES:
        k = decisions_counted(variant, n, decisions)
        base = callgrind_ir(binary, [str(n), "0", *extra])
        per[str(n)] = round((callgrind_ir(binary, [str(n), str(k), *extra]) - base) / k)
    return per


def render(res):
    rows = ["| decision | " + " | ".join(f"{n:,} workers" for n in SIZES) + " | 1,000 / 8 |",
            "|---|" + "---:|" * (len(SIZES) + 1)]
    for key, label in VARIANTS.items():
        us = res[key]
        cells = " | ".join(f"{us[str(n)]:.1f} µs" for n in SIZES)
        rows.append(f"| {label} | {cells} | {us['1000'] / us['8']:.2f}x |")
    ratio = " | ".join(
        f"{res['full_scan'][str(n)] / res['candidates'][str(n)]:.1f}x" for n in SIZES)
    rows.append(f"| full scan / candidate set | {ratio} | |")
    stamp = f"`{res['command']}` at {res['commit']}, {res['date']} (criterion medians)"
    ir = res.get("instructions")
    if ir:
        for key, label in VARIANTS.items():
            cells = " | ".join(f"{ir[key][str(n)]:,}" for n in SIZES)
            rows.append(f"| {label}, instructions | {cells} | "
                        f"{ir[key]['1000'] / ir[key]['8']:.2f}x |")
        k = ir["decisions"]
        stamp += (f"; instructions per decision counted by callgrind over {k:,} decisions "
                  f"({decisions_counted('full_scan', SIZES[-1], k):,} for the full scan past 64 "
                  f"workers), less the setup "
                  f"(`{ir['command']}`)")
    return "\n".join([BEGIN, stamp, "", *rows, END])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--criterion", default="target/criterion")
    ap.add_argument("--out", default="docs/results/decision-scale.json")
    ap.add_argument("--update-docs", action="store_true")
    ap.add_argument("--instructions", metavar="BIN",
                    help="the fleet_instructions bench binary: count instructions per decision")
    ap.add_argument("--decisions", type=int, default=5000)
    a = ap.parse_args()
    root = pathlib.Path(a.criterion)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    res = {
        "command": "cargo bench -p kvrouter --bench routing_path -- kv_fleet",
        "commit": commit,
        "date": datetime.date.today().isoformat(),
        **{v: collect(root, v) for v in VARIANTS},
    }
    if a.instructions:
        res["instructions"] = {
            "command": "python3 crates/kvrouter/benches/fleet/report.py --instructions "
                       "<fleet_instructions bench binary>",
            "decisions": a.decisions,
            **{v: instructions(a.instructions, v, a.decisions) for v in VARIANTS},
        }
    pathlib.Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    if a.update_docs:
        doc = pathlib.Path("docs/benchmarks.md")
        text = doc.read_text()
        start, end = text.index(BEGIN), text.index(END) + len(END)
        doc.write_text(text[:start] + render(res) + text[end:])
    print(render(res))


if __name__ == "__main__":
    main()
