"""Plots scale.sh's summary.txt: router CPU per request against worker count and prompt length,
one line per mode. usage: python3 plot_scale.py SUMMARY.txt OUT.png (needs matplotlib)."""

from __future__ import annotations

import sys
from collections import defaultdict


def parse(path: str) -> list[dict[str, str]]:
    rows = []
    for line in open(path):
        kv = dict(p.split("=", 1) for p in line.split() if "=" in p)
        if "router_cpu_us_per_req" in kv:
            rows.append(kv)
    return rows


def main(src: str, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = parse(src)
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    by_workers: dict[str, dict[int, float]] = defaultdict(dict)
    by_prompt: dict[str, dict[int, float]] = defaultdict(dict)
    for r in rows:  # later lines win (a re-run replaces a point)
        us = float(r["router_cpu_us_per_req"])
        if r.get("prompt") == "32":
            by_workers[r["mode"]][int(r["workers"])] = us
        elif r.get("workers") == "8":
            by_prompt[r["mode"]][int(r["prompt"])] = us
    for mode, pts in sorted(by_workers.items()):
        xs = sorted(pts)
        a.plot(xs, [pts[x] for x in xs], marker="o", label=mode)
    a.set_xscale("log")
    a.set_xlabel("workers (32-token prompts, 32 connections)")
    a.set_ylabel("router CPU per request (µs)")
    a.set_title("by fleet size")
    a.legend()
    for mode, pts in sorted(by_prompt.items()):
        xs = sorted(pts)
        b.plot(xs, [pts[x] for x in xs], marker="o", label=mode)
    b.set_xscale("log")
    b.set_yscale("log")
    b.set_xlabel("prompt tokens (8 workers, 8 connections)")
    b.set_title("by prompt length")
    b.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
