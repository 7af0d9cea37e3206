"""The pressure suite's charts from its results file: hit rate and TTFT p50/p99 against fleet
capacity per router (one panel per workload; solid = first timing model, dashed = second),
the E2E CDF per router and case, and rollout batch makespans."""

from __future__ import annotations

from pathlib import Path

from .. import report

STYLES = ("-", "--", ":", "-.")


def draw(res: dict, img_dir: Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in res.get("runs", []) if not r.get("error")]
    if not runs:
        return []
    img_dir.mkdir(parents=True, exist_ok=True)
    wls = list(dict.fromkeys(r["workload"] for r in runs))
    tms = list(dict.fromkeys(r.get("timing_model") for r in runs))
    names = list(dict.fromkeys(r["router"] for r in runs))
    fam = {r["router"]: r.get("family", "") for r in runs}
    colors = report._colors(names, fam)
    for n in names:
        if fam[n] == "reference":
            colors[n] = (0, 0, 0, 1)
    out = []

    def lines(ax, wl, key, scale=1.0):
        for tm_i, tm in enumerate(tms):
            for n in names:
                pts = sorted((r["kv_tokens_per_worker"], (r["summary"] or {}).get(key)) for r in runs
                             if r["workload"] == wl and r["router"] == n and r.get("timing_model") == tm
                             and (r["summary"] or {}).get(key) is not None)
                if not pts:
                    continue
                ax.plot([p[0] for p in pts], [float(p[1]) * scale for p in pts], STYLES[tm_i % len(STYLES)],
                        marker="o", color=colors[n], label=n if tm_i == 0 else None)
        ax.set_xscale("log", base=2)
        _plain_minor(ax)
        ax.set_xlabel("KV tokens per worker")
        ax.grid(alpha=0.3)

    def legend(fig, axes):
        handles, labels = [], []
        for ax in axes:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                if lab not in labels:
                    handles.append(h)
                    labels.append(lab)
        fig.legend(handles, labels, fontsize=8, ncol=4, loc="lower center")

    names_of = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dot"}
    tm_note = ", ".join(f"{tm} {names_of[STYLES[i % len(STYLES)]]}" for i, tm in enumerate(tms))
    fig, axes = plt.subplots(1, len(wls), figsize=(4 * len(wls), 4.2), squeeze=False)
    for ax, wl in zip(axes[0], wls):
        lines(ax, wl, "hit_rate", 100)
        ax.set_title(wl)
        ax.set_ylabel("prefix hit rate (%)")
    fig.suptitle(f"Hit rate against fleet capacity (timing model: {tm_note})")
    legend(fig, axes[0])
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    out.append(_save(fig, img_dir / "pressure-hit-rate.png"))

    fig, axes = plt.subplots(2, len(wls), figsize=(4 * len(wls), 7.5), squeeze=False)
    for j, wl in enumerate(wls):
        for i, (key, label) in enumerate((("ttft_p50_ms", "TTFT p50 (ms)"), ("ttft_p99_ms", "TTFT p99 (ms)"))):
            lines(axes[i][j], wl, key)
            axes[i][j].set_yscale("log")
            _plain_minor(axes[i][j])
            axes[i][j].set_title(wl + (" (non-streaming: E2E)" if wl == "grpo" else ""))
            axes[i][j].set_ylabel(label)
    fig.suptitle(f"TTFT against fleet capacity, lower is better (timing model: {tm_note})")
    legend(fig, axes[0])
    fig.tight_layout(rect=(0, 0.07, 1, 0.96))
    out.append(_save(fig, img_dir / "pressure-ttft.png"))

    caps = list(dict.fromkeys(r["capacity"] for r in runs))
    tm0 = tms[0]
    fig, axes = plt.subplots(len(caps), len(wls), figsize=(4 * len(wls), 3.6 * len(caps)), squeeze=False)
    for i, cap in enumerate(caps):
        for j, wl in enumerate(wls):
            ax = axes[i][j]
            for r in runs:
                if (r["workload"], r["capacity"], r.get("timing_model")) != (wl, cap, tm0):
                    continue
                q = _e2e_quantiles(r)
                if q:
                    ax.plot(q, [k / (len(q) - 1) for k in range(len(q))], color=colors[r["router"]], label=r["router"])
            ax.set_xscale("log")
            _plain_minor(ax)
            ax.set_title(f"{wl}, {cap}")
            ax.set_xlabel("E2E latency (ms)")
            ax.grid(alpha=0.3)
        axes[i][0].set_ylabel("fraction of requests")
    fig.suptitle(f"E2E latency CDF (timing model {tm0}; mixed workload: its agent part)")
    legend(fig, [a for row in axes for a in row])
    fig.tight_layout(rect=(0, 0.07, 1, 0.96))
    out.append(_save(fig, img_dir / "pressure-e2e-cdf.png"))

    mk_wls = [wl for wl in wls if any(_makespan(r) is not None for r in runs if r["workload"] == wl)]
    fig, axes = plt.subplots(1, max(1, len(mk_wls)), figsize=(max(11, 6 * len(mk_wls)), 4.8), squeeze=False)
    for ax, wl in zip(axes[0], mk_wls):
        groups = [(cap, tm) for tm in tms for cap in caps]
        width = 0.8 / max(1, len(names))
        for i, n in enumerate(names):
            xs, ys = [], []
            for g, (cap, tm) in enumerate(groups):
                r = next((r for r in runs if (r["workload"], r["capacity"], r.get("timing_model"), r["router"])
                          == (wl, cap, tm, n)), None)
                v = _makespan(r) if r else None
                if v is not None:
                    xs.append(g + (i - (len(names) - 1) / 2) * width)
                    ys.append(v)
            ax.bar(xs, ys, width, color=colors[n], label=n)
        ax.set_xticks(range(len(groups)), [f"{cap}\n{tm}" for cap, tm in groups])
        ax.set_title(f"{wl}: rollout batch makespan (mean), lower is better")
        ax.set_ylabel("seconds (simulated)")
        ax.grid(axis="y", alpha=0.3)
    legend(fig, axes[0])
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    out.append(_save(fig, img_dir / "pressure-makespan.png"))
    return out


def _plain_minor(ax) -> None:
    """No labels on minor log ticks (they overlap)."""
    from matplotlib.ticker import NullFormatter
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())


def _e2e_quantiles(r: dict) -> list[float] | None:
    parts = r.get("parts") or {}
    s = parts["agent"]["summary"] if "agent" in parts else r.get("summary") or {}
    return s.get("e2e_quantiles_ms")


def _makespan(r: dict) -> float | None:
    parts = r.get("parts") or {}
    s = parts["rollout"]["summary"] if "rollout" in parts else r.get("summary") or {}
    v = s.get("makespan_mean_s")
    return float(v) if isinstance(v, (int, float)) else None


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
