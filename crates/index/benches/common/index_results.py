#!/usr/bin/env python3
"""`index_report` output as the results files behind docs/benchmarks.md's index blocks
(`index-find-workers`, `index-find-length`, `index-scale`: tables for scripts/compare/docs.py).
Standard library only; the plots of the same output are index_plots.py's.

Usage (from the repository root):
    KVROUTER_BENCH_REPS=5 cargo bench -p kvrouter-index --bench index_report > target/report.txt
    KVROUTER_BENCH_ONLY=scale cargo bench -p kvrouter-index --bench index_report >> target/report.txt
    python3 crates/index/benches/common/index_results.py target/report.txt --commit <sha> \\
        --conditions "<load>" [--out docs/results]
"""

import argparse
import datetime
import json
import pathlib
import re
import sys

NUM = r"([0-9.]+)"
COMMAND = "cargo bench -p kvrouter-index --bench index_report"


def parse(text):
    workers, hashed_workers, length, hashed = {}, {}, {}, {}
    scale, current = [], None
    for line in text.splitlines():
        if m := re.search(r"^find \(seq hashes given\) (\d+) workers\s+p50\s+" + NUM + r" us\s+p99\s+" + NUM, line):
            workers[int(m[1])] = (m[2], m[3])
        elif m := re.search(r"^hash \+ find \(trace prompt\) (\d+) workers\s+p50\s+" + NUM, line):
            hashed_workers[int(m[1])] = m[2]
        elif m := re.search(r"^find\s+(\d+) tokens \(all matched\)\s+p50\s+" + NUM + r" us\s+p99\s+" + NUM, line):
            length[int(m[1])] = (m[2], m[3])
        elif m := re.search(r"^hash \+ find\s+(\d+) tokens\s+p50\s+" + NUM + r" us\s+p99\s+" + NUM, line):
            hashed[int(m[1])] = (m[2], m[3])
        elif m := re.search(r"^\s*(\d+) workers:\s+(\d+) entries,\s+(\d+) B = " + NUM + r" B/entry, ingest "
                            + NUM + r" M blocks/CPU-s", line):
            current = {"workers": int(m[1]), "entries": int(m[2]), "bytes": int(m[3]),
                       "bpe": m[4], "ingest": m[5]}
            scale.append(current)
        elif current and (m := re.search(r"^\s+find one context.*p50\s+" + NUM + r" us\s+p99\s+" + NUM, line)):
            current["one"] = (m[1], m[2])
        elif current and (m := re.search(r"^\s+find system prompt.*p50\s+" + NUM + r" us\s+p99\s+" + NUM, line)):
            current["system"] = (m[1], m[2])
    return workers, hashed_workers, length, hashed, scale


def table(name, only, columns, rows, a):
    return {
        "kind": "table",
        "name": name,
        "command": f"{only}{COMMAND}" if only else COMMAND,
        "commit": a.commit,
        "date": a.date,
        "conditions": a.conditions,
        "columns": columns,
        "rows": rows,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", help="index_report's stdout (the default sections and `scale`)")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--conditions", required=True)
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--out", default="docs/results")
    a = ap.parse_args()
    workers, hashed_workers, length, hashed, scale = parse(pathlib.Path(a.report).read_text())
    if not (workers and length and scale):
        sys.exit(f"{a.report}: needs the find, find-by-length and scale sections")
    sizes = sorted(workers)
    tokens = sorted(length)
    out = {
        "index-find-workers": table(
            "index-find-workers", "KVROUTER_BENCH_REPS=5 ",
            ["workers (1,000 trace prompts round-robin)"] + [f"{w:,}" for w in sizes],
            [["find p50 / p99 (us)"] + [" / ".join(workers[w]) for w in sizes],
             ["hash + find p50 (us)"] + [hashed_workers.get(w, "") for w in sizes]], a),
        "index-find-length": table(
            "index-find-length", "KVROUTER_BENCH_REPS=5 ",
            ["prompt (all matched, one of 64 workers)"] + [f"{n // 1024}k" for n in tokens[:-1]]
            + [f"{tokens[-1] // 1024}k tokens"],
            [["find p50 / p99, hashes given (us)"] + [" / ".join(length[n]) for n in tokens],
             ["hash + find p50 / p99 (us)"] + [" / ".join(hashed[n]) for n in tokens]], a),
        "index-scale": table(
            "index-scale", "KVROUTER_BENCH_ONLY=scale ",
            ["workers", "entries", "bytes (allocator)", "B/entry", "ingest so far",
             "find one context (6,250 blocks) p50 / p99",
             "find system prompt (all hold it) p50 / p99"],
            [[f"{r['workers']:,}", f"{r['entries']:,}", f"{r['bytes'] / 1e6:.1f} MB", r["bpe"],
              f"{r['ingest']} M/CPU-s", " / ".join(r["one"]) + " us", " / ".join(r["system"]) + " us"]
             for r in scale], a),
    }
    for name, doc in out.items():
        path = pathlib.Path(a.out) / f"{name}.json"
        path.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
