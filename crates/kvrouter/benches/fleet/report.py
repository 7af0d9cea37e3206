#!/usr/bin/env python3
"""Decision cost by fleet size: reads criterion's estimates of routing_path's kv_fleet_* cases
(the full scan and the candidate set, run side by side) into docs/results/decision-scale.json
and renders the table between the markers in docs/benchmarks.md.

usage: cargo bench -p kvrouter --bench routing_path -- kv_fleet
       python3 crates/kvrouter/benches/fleet/report.py [--criterion target/criterion]
           [--out docs/results/decision-scale.json] [--update-docs]
"""
import argparse
import datetime
import json
import pathlib
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


def render(res):
    rows = ["| decision | " + " | ".join(f"{n:,} workers" for n in SIZES) + " | 1,000 / 8 |",
            "|---|" + "---:|" * (len(SIZES) + 1)]
    for key, label in VARIANTS.items():
        us = res[key]
        cells = " | ".join(f"{us[str(n)]:.1f} µs" for n in SIZES)
        rows.append(f"| {label} | {cells} | {us['1000'] / us['8']:.1f}x |")
    ratio = " | ".join(
        f"{res['full_scan'][str(n)] / res['candidates'][str(n)]:.1f}x" for n in SIZES)
    rows.append(f"| full scan / candidate set | {ratio} | |")
    stamp = f"`{res['command']}` at {res['commit']}, {res['date']} (criterion medians)"
    return "\n".join([BEGIN, stamp, "", *rows, END])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--criterion", default="target/criterion")
    ap.add_argument("--out", default="docs/results/decision-scale.json")
    ap.add_argument("--update-docs", action="store_true")
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
    pathlib.Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    if a.update_docs:
        doc = pathlib.Path("docs/benchmarks.md")
        text = doc.read_text()
        start, end = text.index(BEGIN), text.index(END) + len(END)
        doc.write_text(text[:start] + render(res) + text[end:])
    print(render(res))


if __name__ == "__main__":
    main()
