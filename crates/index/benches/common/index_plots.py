"""Plots of `index_report` output: find latency against fleet size and against prompt length.

Usage (matplotlib required):
    KVROUTER_BENCH_ONLY=find,scale cargo bench -p kvrouter-index --bench index_report | tee /tmp/report.txt
    python3 crates/index/benches/common/index_plots.py /tmp/report.txt docs/img

Reads the lines `find (seq hashes given) <W> workers p50 .. p99 ..` and
`find <N> tokens (all matched) p50 .. p99 ..` / `hash + find <N> tokens ...`; writes
index-find-workers.png and index-find-length.png.
"""

import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

NUM = r"([0-9.]+)"


def parse(path):
    workers, length, hashed = [], [], []
    for line in open(path, encoding="utf-8"):
        m = re.search(r"^find \(seq hashes given\) (\d+) workers\s+p50\s+" + NUM + r" us\s+p99\s+" + NUM, line)
        if m:
            workers.append((int(m[1]), float(m[2]), float(m[3])))
        m = re.search(r"^find\s+(\d+) tokens \(all matched\)\s+p50\s+" + NUM + r" us\s+p99\s+" + NUM, line)
        if m:
            length.append((int(m[1]), float(m[2]), float(m[3])))
        m = re.search(r"^hash \+ find\s+(\d+) tokens\s+p50\s+" + NUM + r" us\s+p99\s+" + NUM, line)
        if m:
            hashed.append((int(m[1]), float(m[2]), float(m[3])))
    return workers, length, hashed


def plot(ax, rows, label):
    xs = [r[0] for r in rows]
    ax.plot(xs, [r[1] for r in rows], "o-", label=f"{label} p50")
    ax.plot(xs, [r[2] for r in rows], "s--", label=f"{label} p99")


def main():
    src, out = sys.argv[1], sys.argv[2]
    workers, length, hashed = parse(src)

    fig, ax = plt.subplots(figsize=(6, 4))
    plot(ax, workers, "find_matches")
    ax.set_xscale("log")
    ax.set_xticks([w for w, _, _ in workers], [str(w) for w, _, _ in workers])
    ax.set_xlabel("workers (1,000 trace prompts stored round-robin)")
    ax.set_ylabel("latency (us)")
    ax.set_title("KV index find_matches against fleet size")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(f"{out}/index-find-workers.png", dpi=110)

    fig, ax = plt.subplots(figsize=(6, 4))
    plot(ax, length, "find (hashes given)")
    plot(ax, hashed, "hash + find")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks([n for n, _, _ in length], [f"{n // 1024}k" for n, _, _ in length])
    ax.set_xlabel("prompt length (tokens, all blocks matched on one of 64 workers)")
    ax.set_ylabel("latency (us)")
    ax.set_title("KV index query against prompt length")
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{out}/index-find-length.png", dpi=110)


if __name__ == "__main__":
    main()
