#!/usr/bin/env python3
"""The peers bench's output as docs/results/index-peers.json (a `table` for scripts/compare/docs.py).

Usage (from the repository root; several runs, each cell the median over them):
    for i in 1 2 3 4 5; do (cd crates/index/benches/peers && cargo bench --bench peers) \
        > target/peers-$i.txt; done
    python3 crates/index/benches/peers/results.py target/peers-*.txt --commit <sha> \
        --conditions "<load, machine>" > docs/results/index-peers.json

Adds, per fleet size, kvrouter's ratios to the best peer (ingest per CPU-second: higher is
better; find p50 and 64k hash + find p50: lower is better), which is how issue 26's targets
read.
"""

import argparse
import datetime
import json
import re
import sys

OURS = "kvrouter KvIndex"
NAMES = {"dynamo ConcurrentRadixTreeCompressed": "dynamo CRTC",
         "smg-radix-tree RadixTree": "smg-radix-tree"}
ROW = re.compile(
    r"^(?P<name>.+?)\s{2,}(?P<wall>[\d.]+) \|\s+(?P<cpu>[\d.]+)\s+(?P<f50>[\d.]+)us\s+"
    r"(?P<f99>[\d.]+)us\s+(?P<h50>[\d.]+)us\s+(?P<h99>[\d.]+)us\s+(?P<l50>[\d.]+)us\s+"
    r"(?P<bpe>[\d.]+)\s+(?P<ev>\d+)$")


def parse(text):
    """[(workers, [row dict])] in output order."""
    fleets = []
    for line in text.splitlines():
        m = re.match(r"^== (\d+) workers", line)
        if m:
            fleets.append((int(m.group(1)), []))
            continue
        m = ROW.match(line.strip())
        if m and fleets:
            fleets[-1][1].append(m.groupdict())
    return fleets


def median_runs(runs):
    """One run's shape, each numeric cell the median over `runs` (same fleets and indexes)."""
    first = runs[0]
    out = []
    for i, (workers, found) in enumerate(first):
        rows = []
        for j, r in enumerate(found):
            cells = [run[i][1][j] for run in runs]
            if any(c["name"] != r["name"] for c in cells) or any(run[i][0] != workers for run in runs):
                sys.exit("runs differ in fleets or indexes")
            med = {"name": r["name"]}
            for k in r:
                if k != "name":
                    # The lower median: a value one run measured, as printed.
                    med[k] = sorted((c[k] for c in cells), key=float)[(len(cells) - 1) // 2]
            rows.append(med)
        out.append((workers, rows))
    return out


def table(fleets):
    rows = []
    for workers, found in fleets:
        peers = [r for r in found if not r["name"].startswith("kvrouter")]
        best_cpu = max(float(r["cpu"]) for r in peers)
        best_f50 = min(float(r["f50"]) for r in peers)
        best_l50 = min(float(r["l50"]) for r in peers)
        for r in found:
            name = NAMES.get(r["name"], r["name"])
            ratio = ""
            if r["name"] == OURS:
                name = f"**{name}**"
                ratio = (f"{float(r['cpu']) / best_cpu:.2f}x / {float(r['f50']) / best_f50:.2f}x"
                         f" / {float(r['l50']) / best_l50:.2f}x")
            rows.append([
                str(workers), name,
                f"{float(r['wall']):.3g} / {float(r['cpu']):.3g}",
                f"{r['f50']} / {r['f99']} us",
                f"{r['h50']} us",
                f"{r['l50']} us",
                r["bpe"],
                f"{int(r['ev']):,}",
                ratio,
            ])
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outputs", nargs="+", help="the bench's stdout, one file per run")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--conditions", required=True)
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    a = ap.parse_args()
    runs = []
    for path in a.outputs:
        with open(path) as f:
            runs.append(parse(f.read()))
        if not runs[-1]:
            sys.exit(f"{path}: no '== N workers' sections")
    fleets = median_runs(runs)
    json.dump({
        "kind": "table",
        "name": "index-peers",
        "command": "cd crates/index/benches/peers && cargo bench --bench peers"
                   f" ({len(runs)} runs, each cell the median)",
        "commit": a.commit,
        "date": a.date,
        "conditions": a.conditions,
        "columns": ["workers", "index", "ingest M/s wall / CPU", "find p50 / p99", "h+f p50",
                    "64k h+f p50", "B/entry", "B after eviction",
                    "vs best peer: ingest CPU / find p50 / 64k h+f"],
        "rows": table(fleets),
    }, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
