"""The pressure suite's PD cases (kvrouter issue 24): GRPO rollouts and agent sessions on
prefill-decode fleets (`--disaggregation-mode prefill|decode` mocks, docs/pd.md) of two shapes,
kvrouter's PD mode next to sgl-router 0.3.2's and SMG 1.13's on the same mocks, kvrouter's own
aggregated mode on the same number of workers, and the shared-cache reference. Writes
`OUT/pd.json` after every run and `OUT/pd.md` (with `--update-docs`, the `## PD disaggregation`
block of docs/benchmarks.md) at the end; `pd-report` re-renders merged files."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from .. import fleet as fleet_mod
from .. import portable, presets, procstat, report, routers, runenv
from ..measure import Part, measure
from . import suite

HERE = Path(__file__).resolve().parent.parent.parent  # scripts/compare
BEGIN, END, HEADING = "<!-- pd:begin -->", "<!-- pd:end -->", "## PD disaggregation"
WORKLOADS = ("grpo", "agent")
KV = "kvrouter kv"
AGGREGATED = "kvrouter kv aggregated"
_f = report._f


@dataclass
class PdCase:
    workload: str                  # grpo | agent
    fleet: fleet_mod.FleetSpec     # a PD fleet (prefill > 0); the timing model is added per run
    parts: list[Part]
    timeout_s: float

    @property
    def key(self) -> str:
        return f"{self.workload}-{self.fleet.shape()}"


def build(size: str, seed: int = 7) -> list[PdCase]:
    """`[pd.SIZE]` of workloads/presets.toml. `full`: 8 workers as 2P6D and 4P4D (each also with
    decode radix caches), each KV fitting the working set (1 Mi tokens each), the pressure suite's
    full GRPO rollout and agent sessions; `quick`: 1P1D with their tiny shapes."""
    if size not in presets.suite("pd"):
        raise ValueError(size)
    t = presets.suite("pd", size)
    tail = ["--max-duration-secs", str(t["max_duration_secs"])]
    parts = {"grpo": (t["grpo"]["speedup"], [*presets.argv(t["grpo"]["preset"]), *tail,
                                              *suite._common(seed, t["grpo"]["speedup"], stream=False)]),
             "agent": (t["agent"]["speedup"], suite._agent_argv(t["agent"]["preset"], None, seed,
                                                                 t["agent"]["speedup"], t))}
    cases = []
    for wl in WORKLOADS:
        s, argv = parts[wl]
        for workers, prefill, radix in t["shapes"]:
            spec = fleet_mod.FleetSpec(workers=workers, speedup=s, max_total_tokens=t["kv"], prefill=prefill,
                                       decode_radix=radix)
            cases.append(PdCase(wl, spec, [Part("rollout" if wl == "grpo" else "agent", argv, records=True)],
                                t["timeout_s"]))
    return cases


def run(a) -> int:
    out = runenv.out_dir(a, "pd")
    logs = out / "logs"
    size = a.size
    tms = runenv.csv(a.timing_models)
    wanted = runenv.csv(a.workloads or ",".join(WORKLOADS))
    cases = [c for c in build(size, a.seed) if c.workload in wanted or c.key in wanted]
    if not cases:
        raise SystemExit(f"--workloads: nothing matches {wanted} (known: {', '.join(c.key for c in build(size))})")
    pd_routers = routers.select(a.only, [routers.KVROUTER[0], routers.SGLR[0], routers.SMG[0]])
    bin_dir = runenv.build_binaries(a, logs)
    pd_routers, launch, peers = runenv.prepare_routers(a, pd_routers, bin_dir, HERE / "model", logs)
    aggregated = routers.RouterSpec(AGGREGATED, "kvrouter", routers.KVROUTER[0].args)
    res = {"meta": {
        "suite": "pd", "date": dt.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), "git": runenv.git_describe(),
        "machine": runenv.machine(), "size": size, "timing_models": tms,
        "command": "python3 scripts/compare/compare.py " + " ".join(sys.argv[1:]), **peers,
        "routers": [{"name": r.name, "args": list(r.args)} for r in pd_routers],
        "loadavg_start": os.getloadavg(), "binaries": runenv.describe_bins(bin_dir, a)}, "runs": []}
    results = out / "pd.json"
    t_start = time.monotonic()
    for tm in tms:
        for c in cases:
            spec = replace(c.fleet, extra_args=[*c.fleet.extra_args, "--timing-model", tm])
            targets = [(spec, pd_routers), (spec.aggregated(), [aggregated])]
            if not a.no_reference:
                targets.append((spec.shared_cache(), [routers.REFERENCE]))
            for fspec, rts in targets:
                print(f"[fleet] {fspec.describe()}", flush=True)
                fl = fleet_mod.Fleet(bin_dir / "sglang-mock", fspec, launch.model_dir,
                                     logs / f"fleet-{tm}-{len(res['runs'])}")
                try:
                    for r in rts:
                        t0 = time.monotonic()
                        base = {"workload": c.workload, "shape": c.fleet.shape(), "case": c.key, "timing_model": tm,
                                "workers": c.fleet.workers, "prefill_workers": c.fleet.prefill,
                                "kv_tokens_per_worker": c.fleet.max_total_tokens}
                        rec = measure(r, f"{tm}-{c.key}", fl, launch, bin_dir / "loadgen", out, c.parts,
                                      c.timeout_s, base)
                        res["runs"].append(rec)
                        print(progress_line(rec, time.monotonic() - t0), flush=True)
                        results.write_text(json.dumps(portable.tree(res), indent=1))
                finally:
                    fl.stop()
    res["meta"]["loadavg_end"] = os.getloadavg()
    res["meta"]["wall_s"] = time.monotonic() - t_start
    write_outputs(res, out, a.update_docs)
    print((out / "pd.md").read_text())
    bad = [f"{r.get('timing_model')} {r.get('case')} {r.get('router')}: {(r.get('error') or 'no ok request').splitlines()[0]}"
           for r in res["runs"] if r.get("error") or not ((r.get("summary") or {}).get("ok") or 0) > 0]
    for b in bad:
        print(f"[pd] row failed: {b}", flush=True)
    print(f"[pd] results: {results}  report: {out / 'pd.md'}  ({res['meta']['wall_s']:.0f} s)", flush=True)
    return 0 if not bad else 1


def progress_line(rec: dict, secs: float) -> str:
    head = f"[run] {rec.get('timing_model', ''):8} {rec.get('case', ''):12} {rec.get('router', ''):28}"
    if rec.get("error"):
        return head + " FAILED"
    s = rec.get("summary") or {}
    return (head + f" prefill hit={_f(rec.get('prefill_hit_rate'), '.1%')} hit={_f(s.get('hit_rate'), '.1%')} "
            f"ttft p50={_f(s.get('ttft_p50_ms'), '.0f')} p99={_f(s.get('ttft_p99_ms'), '.0f')} ms "
            f"makespan={_f(s.get('makespan_mean_s'), '.1f')} s ok={s.get('ok')} errors={s.get('errors')} ({secs:.0f} s wall)"
            + procstat.stall_warning(rec))


def _row(rows: list[dict], pred) -> dict | None:
    return next((r for r in rows if pred(r) and not r.get("error")), None)


def _hit(r: dict | None) -> float | None:
    """A row's prefill-side hit rate (PD rows), else the hit rate loadgen saw (aggregated, reference)."""
    if r is None:
        return None
    return r.get("prefill_hit_rate", (r.get("summary") or {}).get("hit_rate"))


def evaluate(rows: list[dict]) -> list[dict]:
    """Issue 24's targets for one case's rows: prefill-side hit rate within 1 point of the
    shared-cache bound on sibling bursts; TTFT p50 and p99 at least 30% below the best peer's PD;
    makespan below the best peer's (rollouts)."""
    kv = _row(rows, lambda r: r.get("router") == KV)
    ref = _row(rows, lambda r: r.get("family") == "reference")
    peers = [r for r in rows if r.get("family") in ("sglr", "smg") and not r.get("error")]
    s = (kv or {}).get("summary") or {}
    out = []

    def add(text: str, measured: str, met: bool | None, gap: str = "") -> None:
        out.append({"target": text, "measured": measured, "met": met, "gap": gap})

    if rows and rows[0].get("workload") == "grpo":
        h, b = _hit(kv), _hit(ref)
        if h is None or b is None:
            add("prefill hit rate within 1 point of the shared-cache bound", "–", None, "a row is missing")
        else:
            add("prefill hit rate within 1 point of the shared-cache bound", f"{h:.1%} vs {b:.1%}",
                h >= b - 0.01, f"{(b - h) * 100:.1f} points below")
    for key, what in (("ttft_p50_ms", "TTFT p50"), ("ttft_p99_ms", "TTFT p99"), ("makespan_mean_s", "makespan")):
        vals = [(p["router"], (p.get("summary") or {}).get(key)) for p in peers]
        vals = [(n, v) for n, v in vals if isinstance(v, (int, float))]
        mine = s.get(key)
        if key == "makespan_mean_s" and mine is None and not vals:
            continue
        limit = 0.7 if key.startswith("ttft") else 1.0
        text = f"{what} {'30% below' if limit < 1 else 'below'} the best peer's PD"
        if mine is None or not vals:
            add(text, "–", None, "a row is missing")
            continue
        best_name, best = min(vals, key=lambda x: x[1])
        ratio = mine / best if best else float("inf")
        add(text, f"{ratio:.2f}x {best_name}", ratio < 1.0 if limit == 1.0 else ratio <= limit,
            f"{ratio:.2f}x where <= {limit:.2f}x was the target")
    return out


def _commands(meta: dict) -> list[str]:
    """The command of each run merged into this report (later ones replaced rows of earlier ones)."""
    sources = meta.get("merged_from") or [meta]
    cmds = [f"{m['command']}  # {m.get('date', '?')}" if len(sources) > 1 else m["command"]
            for m in sources if m.get("command")]
    return cmds or ["python3 scripts/compare/compare.py pd"]


def _borrowed_reference(by_case: dict, tm, case: str, rows: list[dict]) -> list[dict]:
    """A decode-radix case (`grpo-2p6dr`) has the bound of its plain shape (`grpo-2p6d`): the
    reference is one cache of the whole fleet's KV either way."""
    if any(r.get("family") == "reference" for r in rows) or not case or not case.endswith("r"):
        return []
    return [r for r in by_case.get((tm, case[:-1]), []) if r.get("family") == "reference"]


def case_table(rows: list[dict]) -> str:
    head = ("| router | prefill hit | hit (client) | TTFT p50 (ms) | TTFT p99 (ms) | E2E p99 (ms) | makespan mean (s) "
            "| ok / errors | prefill busiest / mean | decode busiest / mean | router CPU (s) |\n|---|" + "---:|" * 10 + "\n")
    lines = []
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['router']} | failed: {report._err(r['error'])} |" + " |" * 9)
            continue
        s = r.get("summary") or {}
        name = f"*{r['router']}*" if r.get("family") == "reference" else r["router"]
        lines.append("| " + " | ".join([
            name, _f(r.get("prefill_hit_rate"), ".1%"), _f(s.get("hit_rate"), ".1%"), _f(s.get("ttft_p50_ms"), ".0f"),
            _f(s.get("ttft_p99_ms"), ".0f"), _f(s.get("e2e_p99_ms"), ".0f"), _f(s.get("makespan_mean_s"), ".1f"),
            f"{_f(s.get('ok'), '.0f')} / {_f(s.get('errors'), '.0f')}", _f(r.get("prefill_balance_max_over_mean"), ".2f"),
            _f(r.get("decode_balance_max_over_mean"), ".2f"), _f(r.get("router_cpu_s"), ".1f")]) + " |")
    return head + "\n".join(lines) + "\n"


def markdown(res: dict) -> str:
    meta, runs = res.get("meta", {}), res.get("runs", [])
    parts = [f"Measured {meta.get('date', '?')} on {meta.get('machine', '?')}, kvrouter `{meta.get('git', '?')}`, "
             f"sglang-router {meta.get('sglr_version', '?')}, smg {meta.get('smg_version', '?')}, size "
             f"`{meta.get('size', '?')}`; load average (1 min) at start / end {report._load(meta.get('loadavg_start'))}"
             f" / {report._load(meta.get('loadavg_end'))}"
             + (f"; {meta['wall_s'] / 60:.0f} min of wall time" if meta.get("wall_s") else "") + ".\n",
             "Reproduce:\n\n```\n" + "\n".join(_commands(meta)) + "\n```\n",
             "Each PD router is started with `--pd-disaggregation --prefill URL PORT ... --decode URL ...` and "
             "its own `cache_aware` / `--mode kv` policy (the peers' `--prefill-policy` / `--decode-policy` "
             "default to it). *prefill hit*: cached / prompt tokens of the prefill mocks' own counters; *hit "
             "(client)*: what the responses' `meta_info.cached_tokens` say. `kvrouter kv aggregated`: the "
             "same workers without roles (`--worker-urls`). *Reference*: one worker with the whole fleet's KV, "
             "N times as fast. Durations are simulated time.\n"]
    by_case: dict[tuple, list[dict]] = {}
    for r in runs:
        by_case.setdefault((r.get("timing_model"), r.get("case")), []).append(r)
    summary = []
    for (tm, case), rows in by_case.items():
        for t in evaluate(rows + _borrowed_reference(by_case, tm, case, rows)):
            cell = ("met" if t["met"] else f"missed, {t['gap']}") if t["met"] is not None else f"not measured ({t['gap']})"
            summary.append(f"| {case} | {tm} | {t['target']} | {t['measured']} | {cell} |")
    if summary:
        parts.append("### Targets\n\n| case | timing model | target | measured | |\n|---|---|---|---|---|\n"
                     + "\n".join(summary) + "\n")
    for (tm, case), rows in by_case.items():
        first = rows[0]
        parts.append(f"#### {case}, timing model {tm}\n\nFleet: {first.get('fleet', '?')}. Workload: "
                     f"`loadgen {' '.join(first.get('loadgen_args', []))}`.\n")
        parts.append(case_table(rows))
    return "\n".join(parts)


def merge(results: list[dict]) -> dict:
    return report.merge(results, key=lambda r: (r.get("timing_model"), r.get("case"), r.get("router")))


def write_outputs(res: dict, out: Path, update_docs: bool) -> None:
    res = portable.tree(res)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pd.json").write_text(json.dumps(res, indent=1))
    md = markdown(res)
    (out / "pd.md").write_text(md)
    if update_docs:
        report.update_benchmarks_md(runenv.REPO / "docs" / "benchmarks.md", md, begin=BEGIN, end=END, heading=HEADING)
