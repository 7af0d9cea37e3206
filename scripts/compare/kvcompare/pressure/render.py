"""A pressure results file -> `pressure.md` (provenance, targets table, per-workload tables),
charts, and the generated block of `## Routing under pressure` in docs/benchmarks.md."""

from __future__ import annotations

import json
from pathlib import Path

from .. import portable, procstat, report, runenv
from . import suite
from . import targets as targets_mod

BEGIN = "<!-- pressure:begin -->"
END = "<!-- pressure:end -->"
HEADING = "## Routing under pressure"
CHARTS = ("pressure-hit-rate.png", "pressure-ttft.png", "pressure-e2e-cdf.png", "pressure-makespan.png")
_f = report._f


def run_key(run: dict) -> tuple:
    return (run.get("timing_model"), run.get("workload"), run.get("capacity"), run.get("router"))


def merge(results: list[dict]) -> dict:
    """Later files replace earlier runs of the same (timing model, workload, capacity, router)."""
    return report.merge(results, key=run_key)


def progress_line(rec: dict, secs: float) -> str:
    head = f"[run] {rec.get('timing_model', ''):8} {rec.get('case', ''):12} {rec.get('router', ''):28}"
    if rec.get("error"):
        return head + " FAILED"
    s = rec.get("summary") or {}
    mk = f" makespan={_f(s.get('makespan_mean_s'), '.1f')}s" if s.get("makespan_mean_s") is not None else ""
    return (head + f" hit={_f(s.get('hit_rate'), '.1%'):>6} ttft p50={_f(s.get('ttft_p50_ms'), '.0f')} "
            f"p99={_f(s.get('ttft_p99_ms'), '.0f')} ms e2e p99={_f(s.get('e2e_p99_ms'), '.0f')} ms{mk} "
            f"busiest/mean={_f(rec.get('balance_max_over_mean'), '.2f')} ok={s.get('ok')} "
            f"cores={_f(rec.get('cores_used'), '.2f')} load={_f(rec.get('loadavg_1m'), '.1f')} ({secs:.0f} s wall)"
            + procstat.stall_warning(rec))


def _cap(r: dict) -> str:
    kv = r.get("kv_tokens_per_worker") or 0
    size = f"{kv // (1 << 20)} Mi" if kv >= 1 << 20 and kv % (1 << 20) == 0 else f"{kv // 1024} Ki"
    over = ""
    if r.get("working_set_tokens") and r.get("fleet_kv_tokens"):
        over = f", working set {r['working_set_tokens'] / r['fleet_kv_tokens']:.2g}x the fleet's KV"
    return f"{r.get('capacity')} ({r.get('workers')} x {size}{over})"


def targets_table(rows: list[dict], tms: list[str]) -> str:
    head = ("| target | case | " + " | ".join(tms) + " | holds under every model |\n"
            "|---|---|" + "---|" * len(tms) + "---|\n")
    grouped: dict[tuple, dict] = {}
    for r in rows:
        grouped.setdefault((r["target"], r["workload"], r["capacity"], r.get("part")), {})[r["timing_model"]] = r
    lines = []
    for (text, wl, cap, part), per in grouped.items():
        cells = []
        for tm in tms:
            r = per.get(tm)
            if r is None:
                cells.append("not run")
            elif r["met"] is None:
                cells.append(f"not measured ({r['gap']})")
            elif r["met"]:
                cells.append(f"{r['measured']}: **met**")
            else:
                cells.append(f"{r['measured']}: **missed**, {r['gap']}")
        mets = [per[tm]["met"] for tm in tms if tm in per]
        unrun = [tm for tm in ("poly", "roofline") if tm not in per]
        if any(m is False for m in mets):
            holds = "no"
        elif unrun:
            holds = f"not run under {', '.join(unrun)}"
        else:
            holds = "yes" if mets and all(m is True for m in mets) else "–"
        case = f"{wl}{f' ({part})' if part else ''}, {cap}"
        lines.append(f"| {text} | {case} | " + " | ".join(cells) + f" | {holds} |")
    return head + "\n".join(lines) + "\n"


def case_table(runs: list[dict]) -> str:
    makespan = any((r.get("summary") or {}).get("makespan_mean_s") is not None for r in runs)
    head = ("| router | hit rate | TTFT p50 (ms) | TTFT p99 (ms) | E2E p50 (ms) | E2E p99 (ms) | "
            + ("makespan mean / max (s) | " if makespan else "")
            + "ok / errors | busiest worker / mean | router CPU (s) | cores used (all) | load avg |\n|---|"
            + "---:|" * (10 + makespan) + "\n")
    rows = []
    for r in runs:
        if r.get("error"):
            rows.append(f"| {r['router']} | failed: {report._err(r['error'])} |" + " |" * (9 + makespan))
            continue
        s = r.get("summary") or {}
        name = f"*{r['router']}*" if r.get("family") == "reference" else r["router"]
        cells = [name, _f(s.get("hit_rate"), ".1%"), _f(s.get("ttft_p50_ms"), ".0f"), _f(s.get("ttft_p99_ms"), ".0f"),
                 _f(s.get("e2e_p50_ms"), ".0f"), _f(s.get("e2e_p99_ms"), ".0f")]
        if makespan:
            cells.append(f"{_f(s.get('makespan_mean_s'), '.1f')} / {_f(s.get('makespan_max_s'), '.1f')}")
        cells += [f"{_f(s.get('ok'), '.0f')} / {_f(s.get('errors'), '.0f')}", _f(r.get("balance_max_over_mean"), ".2f"),
                  _f(r.get("router_cpu_s"), ".1f"), _f(r.get("cores_used"), ".2f"),
                  _f(r.get("loadavg_1m"), ".1f")]
        rows.append("| " + " | ".join(cells) + " |")
    return head + "\n".join(rows) + "\n"


def markdown(res: dict, img_rel: str | None, targets: list | None = None) -> str:
    """The report of a pressure results file; `targets`: evaluate only these (default: the
    suite's, see `targets.evaluate`)."""
    meta = res.get("meta", {})
    runs = res.get("runs", [])
    tms = list(dict.fromkeys(r.get("timing_model") for r in runs)) or meta.get("timing_models", [])
    parts = [f"Measured {meta.get('date', '?')} on {meta.get('machine', '?')}, kvrouter `{meta.get('git', '?')}`, "
             f"sglang-router {meta.get('sglr_version', '?')}, smg {meta.get('smg_version', '?')}, size "
             f"`{meta.get('size', '?')}`, timing models {', '.join(map(str, tms))}; load average (1 min) at start / end "
             f"{report._load(meta.get('loadavg_start'))} / {report._load(meta.get('loadavg_end'))}"
             + (f"; {meta['wall_s'] / 60:.0f} min of wall time" if meta.get("wall_s") else "") + ".\n"]
    if meta.get("binaries"):
        parts.append(f"Binaries: {meta['binaries']}.\n")
    parts.append("Reproduce:\n\n```\n" + meta.get("command", "python3 scripts/compare/compare.py pressure") + "\n```\n")
    for m in (meta.get("merged_from") or [])[1:]:
        cmd = m.get("command")
        names = sorted({f"{r.get('timing_model')} {r.get('case')} {r['router']}" for r in runs
                        if r.get("source") == cmd and cmd})
        if names:
            parts.append(f"Rows re-measured {m.get('date', '?')}, kvrouter `{m.get('git', '?')}` "
                         f"({len(names)} rows: {', '.join(names[:6])}{', ...' if len(names) > 6 else ''}):"
                         f"\n\n```\n{cmd}\n```\n")
    parts.append("All durations are simulated time (loadgen `--sim-speedup` = the fleet's `--speedup`). Hit rate = "
                 "cached / prompt tokens as loadgen reports them; makespan = time from a rollout batch's first "
                 "request to its last response (mean over batches); busiest worker / mean from the mocks' request "
                 "counters. *Reference*: the same load straight at ONE worker holding the whole fleet's KV and "
                 "running N times as fast (the shared-cache bound on the trace; on sibling bursts not an upper "
                 "bound). kvrouter = `kvrouter kv` (predict-on-route on); best peer = the better of sgl-router / "
                 "SMG on that metric. Cores used = CPU seconds of the mocks, the router and loadgen over the run's "
                 "wall time (the machine's other load is not in it; see the load average).\n")
    missing = not_measured(runs)
    if missing:
        parts.append("Not measured in this file (run them and merge with `pressure-report`): "
                     + "; ".join(missing) + ".\n")
    rows = targets_mod.evaluate(runs, targets)
    if rows:
        met = sum(1 for r in rows if r["met"] is True)
        missed = sum(1 for r in rows if r["met"] is False)
        parts.append(f"### Targets\n\n{met} met, {missed} missed, {len(rows) - met - missed} not measured "
                     f"(of {len(rows)} target x case x timing model).\n")
        parts.append(targets_table(rows, [str(t) for t in tms]))
    if img_rel and runs:
        parts.append(f"![hit rate against fleet capacity per router]({img_rel}/pressure-hit-rate.png)\n")
        parts.append(f"![TTFT p50 and p99 against fleet capacity per router]({img_rel}/pressure-ttft.png)\n")
        parts.append(f"![E2E latency CDF per router]({img_rel}/pressure-e2e-cdf.png)\n")
        parts.append(f"![rollout batch makespan per router]({img_rel}/pressure-makespan.png)\n")
    by_case: dict[tuple, list[dict]] = {}
    for r in runs:
        by_case.setdefault((r.get("workload"), r.get("capacity"), r.get("timing_model")), []).append(r)
    for (wl, cap, tm), case_runs in by_case.items():
        first = case_runs[0]
        if first.get("parts"):
            how = "; ".join(f"{n}: `loadgen {' '.join(p.get('loadgen_args', []))}`" for n, p in first["parts"].items())
        else:
            how = f"`loadgen {' '.join(first.get('loadgen_args', []))}`"
        parts.append(f"#### {wl}, {_cap(first)}, timing model {tm}\n\nFleet: {first.get('fleet', '?')}. "
                     f"Workload: {how}." + (f" {first['notes']}." if first.get("notes") else "") + "\n")
        parts.append(case_table(case_runs))
        for name, p in (first.get("parts") or {}).items():
            sub = [{**r, "summary": r["parts"][name]["summary"]} for r in case_runs
                   if not r.get("error") and name in (r.get("parts") or {})]
            parts.append(f"Its `{name}` part alone:\n\n" + case_table(sub))
        warn = [f"{r['router']}: router log says `{r['router_warnings'][0]}`" for r in case_runs
                if r.get("router_warnings")]
        if warn:
            parts.append("".join(f"- {w}\n" for w in warn))
    return "\n".join(parts)


def not_measured(runs: list[dict], timing_models: tuple[str, ...] = ("poly", "roofline")) -> list[str]:
    """The suite's (timing model, workload, capacity) cases with no row in `runs`, per timing model."""
    have = {(r.get("timing_model"), r.get("workload"), r.get("capacity")) for r in runs}
    out = []
    for tm in timing_models:
        gone = [f"{wl} {cap}" for wl in suite.WORKLOADS for cap in suite.CAPACITIES if (tm, wl, cap) not in have]
        if len(gone) == len(suite.WORKLOADS) * len(suite.CAPACITIES):
            out.append(f"{tm}: every case")
        elif gone:
            out.append(f"{tm}: {', '.join(gone)}")
    return out


def write_outputs(res: dict, out: Path, update_docs: bool) -> bool:
    """Writes pressure.json, pressure.md and the charts (OUT/img); with `update_docs` also the charts
    into docs/img/ and the block into docs/benchmarks.md. False when the report did not render."""
    from . import charts
    res = portable.tree(res)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pressure.json").write_text(json.dumps(res, indent=1))
    try:
        charts.draw(res, out / "img")
        img = "img"
    except ImportError:
        img = None
        print("[pressure] matplotlib missing: no charts", flush=True)
    except Exception as e:  # the quick run's check: the charts must render
        print(f"[pressure] charts did not render: {type(e).__name__}: {e}", flush=True)
        return False
    try:
        md = markdown(res, img)
    except Exception as e:  # the quick run's check: the report must render
        print(f"[pressure] report did not render: {type(e).__name__}: {e}", flush=True)
        return False
    (out / "pressure.md").write_text(md)
    if update_docs:
        repo = runenv.REPO
        if img:
            charts.draw(res, repo / "docs" / "img")
        report.update_benchmarks_md(repo / "docs" / "benchmarks.md", markdown(res, "img" if img else None),
                                    begin=BEGIN, end=END, heading=HEADING)
    return True
