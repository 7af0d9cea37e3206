#!/usr/bin/env python3
"""Side-by-side comparison of kvrouter with sgl-router 0.3.2 and SMG 1.13 on one machine.

Loopback only. Starts an `sglang-mock` fleet, puts each router in front of it in turn, drives the
same `loadgen` workloads through it, and measures hit rate, TTFT/E2E, throughput and the router's
CPU and memory; then a proxy-overhead run with `wrk` against `--speedup 0` workers. Every process
it starts is stopped on exit, failure or Ctrl-C. See docs/compare.md.

    python3 scripts/compare/compare.py --quick            # smoke run, seconds
    python3 scripts/compare/compare.py --update-docs      # the published report (~25 min)
    python3 scripts/compare/compare.py report RESULTS.json --update-docs
    python3 scripts/compare/compare.py pressure --quick    # the pressure suite (issue 10), smoke size
    python3 scripts/compare/compare.py pressure-report OUT/pressure.json --update-docs
    python3 scripts/compare/compare.py pd --quick          # the pressure suite's PD cases (issue 24)
    python3 scripts/compare/compare.py docs [--check]      # every generated block of the docs from docs/results/
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.dont_write_bytecode = True  # keep the source tree clean (no __pycache__)
HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

from kvcompare import fleet as fleet_mod  # noqa: E402
from kvcompare import measure as measure_mod  # noqa: E402
from kvcompare.pressure import pd as pressure_pd  # noqa: E402
from kvcompare.pressure import render as pressure_render  # noqa: E402
from kvcompare.pressure import run as pressure_run  # noqa: E402
from kvcompare.pressure import repeats as pressure_repeats  # noqa: E402
from kvcompare import overhead, portable, procs, procstat, report, routers, runenv, tables, textmodel, venvs, workloads  # noqa: E402

def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", nargs="?", default="run", choices=["run", "report", "pressure", "pressure-report", "pressure-repeats", "pd",
                             "pd-report"],
                    help="run (default) measures side by side; report regenerates its tables/charts from a results "
                         "file; pressure runs the pressure suite (docs/compare.md); pressure-report regenerates "
                         "its report from pressure.json file(s); pressure-repeats folds repeated pressure.json files into one "
                         "table of medians and ranges (docs/results/<--repeats-name>.json); pd runs the pressure suite's PD cases (docs/pd.md), pd-report "
                         "re-renders them from pd.json file(s)"),
    ap.add_argument("results", nargs="*",
                    help="results.json file(s) for `report`; later files replace earlier runs of the same "
                         "(workload, router) and overhead rows of the same router")
    ap.add_argument("--quick", action="store_true", help="tiny workloads, 2 workers, seconds (smoke run)")
    ap.add_argument("--size", choices=["quick", "demo", "full"], default=None,
                    help="workload size (default full; --quick = --size quick)")
    ap.add_argument("--only", default=None,
                    help="routers: groups kvrouter|peers|sglr|smg|demo|all and/or names, comma separated")
    ap.add_argument("--workloads", default=None,
                    help="comma list: grpo,agent,agent-text,trace (default all four); pressure: trace,grpo,tenants,agent,mix or one case such as trace-over")
    ap.add_argument("--timing-models", default=None,
                    help="pressure: the mocks' --timing-model values, comma separated (default poly,roofline; "
                         "--quick: poly)")
    ap.add_argument("--trace-requests", type=int, default=None,
                    help="pressure (full): leading trace requests replayed (default 2400; 0 = the whole trace)")
    ap.add_argument("--no-overhead", action="store_true", help="skip the proxy-overhead (wrk) run")
    ap.add_argument("--no-reference", action="store_true",
                    help="skip the reference run (one worker with the whole fleet's KV, no router)")
    ap.add_argument("--overhead-only", action="store_true", help="only the proxy-overhead run")
    ap.add_argument("--overhead-seconds", type=int, default=None, help="wrk duration per point (default 10)")
    ap.add_argument("--max-conns", type=int, default=32, help="wrk connections for max req/s")
    ap.add_argument("--out", default=None, help="output dir (default target/compare/<UTC time>)")
    ap.add_argument("--update-docs", action="store_true",
                    help="write charts to docs/img/ and regenerate `## Side by side` in docs/benchmarks.md")
    ap.add_argument("--no-build", action="store_true", help="use existing release binaries")
    ap.add_argument("--bin-dir", default=None, help="dir with router, sglang-mock, loadgen (implies --no-build)")
    ap.add_argument("--venv-root", default=str(REPO / ".bench-venv"), help="where the harness creates venvs")
    ap.add_argument("--sglr-venv", default=os.environ.get("COMPARE_SGLR_VENV"),
                    help="existing venv with sglang-router 0.3.2 (default: create under --venv-root)")
    ap.add_argument("--smg-venv", default=os.environ.get("COMPARE_SMG_VENV"),
                    help="existing venv with smg 1.13 (default: create under --venv-root)")
    ap.add_argument("--trace", default=str(workloads.TRACE),
                    help="Mooncake-format trace for the trace workload (default: $KVROUTER_TRACE, else "
                         "../shared/traces/conversation_trace.jsonl beside the checkout)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--repeats-name", default=None,
                    help="pressure-repeats: the docs block / docs/results/<name>.json to write")
    ap.add_argument("--repeats-baseline", default="kvrouter kv no-predict",
                    help="pressure-repeats: the router the others' medians are compared with")
    ap.add_argument("--slow-workers", type=int, default=0,
                    help="pressure: run the last N mocks of every fleet --slow-factor times slower (heterogeneous fleet)")
    ap.add_argument("--slow-factor", type=float, default=2.0,
                    help="pressure: how much slower the --slow-workers mocks run (default 2)")
    a = ap.parse_args(argv)
    if a.command in ("report", "pressure-report", "pressure-repeats", "pd-report") and not a.results:
        ap.error(f"{a.command} needs a results file path")
    a.size = "quick" if a.quick else (a.size or "full")
    if a.command.startswith("pd"):
        if a.size == "demo":
            ap.error("pd: --size is quick or full")
        a.workloads = a.workloads or "grpo,agent"
        a.timing_models = a.timing_models or "poly"
    if a.command.startswith("pressure"):
        if a.size == "demo":
            ap.error("pressure: --size is quick or full")
        a.workloads = a.workloads or "trace,grpo,tenants,agent,mix"
        a.timing_models = a.timing_models or ("poly" if a.size == "quick" else "poly,roofline")
    a.workloads = a.workloads or "grpo,agent,agent-text,trace"
    if a.overhead_seconds is None:
        a.overhead_seconds = 3 if a.size == "quick" else 10
    if a.bin_dir:
        a.no_build = True
    return a


# --- one measured run ---------------------------------------------------------------------------

def measure(spec: routers.RouterSpec, wl: workloads.Workload, fleet: fleet_mod.Fleet, launch: routers.Launch,
            loadgen: Path, out: Path) -> dict:
    return measure_mod.measure(spec, wl.name, fleet, launch, loadgen, out, [measure_mod.Part(wl.name, wl.argv)],
                               wl.timeout_s, {"workload": wl.name})


def overhead_run(a, selected, launch: routers.Launch, mock_bin: Path, out: Path) -> dict:
    if not overhead.wrk_path():
        return {"error": "wrk not installed (apt-get install wrk)"}
    spec = fleet_mod.FleetSpec(workers=2 if a.size == "quick" else 4, speedup=0, max_total_tokens=1 << 20)
    lua = overhead.write_lua(out)
    secs = a.overhead_seconds
    res = {"fleet": spec.describe(), "seconds": secs, "max_conns": a.max_conns, "routers": []}
    fl = fleet_mod.Fleet(mock_bin, spec, launch.model_dir, out / "logs" / "overhead-fleet")
    try:
        # Throughput ratio: wrk with one thread per mock and the same connections, straight to
        # the mocks (spread.lua pins thread i to mock i) and through each router.
        spread_lua = overhead.write_spread_lua(out, fl.urls)
        res["ratio_threads"] = len(fl.urls)
        log = out / "logs" / "wrk.log"
        direct = fl.urls[0]
        print(f"[overhead] direct to one mock ({secs} s per point)", flush=True)
        # Every point starts from empty worker caches: a mock whose cache filled up with earlier
        # points' random prompts evicts on every insert and would slow later routers down.
        fl.flush()
        c1 = overhead.run_wrk(direct, lua, 1, 1, secs, log)
        fl.flush()
        res["direct"] = {"c1": c1, "max": overhead.run_wrk(direct, lua, 2, a.max_conns, secs, log)}
        for spec_r in selected:
            rec = {"router": spec_r.name, "family": spec_r.family}
            router = None
            try:
                router, url = routers.start(spec_r, fl.urls, launch, f"overhead-{spec_r.name.replace(' ', '-')}")
                print(f"[overhead] {spec_r.name}", flush=True)
                fl.flush()
                rec["c1"] = overhead.run_wrk(url, lua, 1, 1, secs, log)
                fl.flush()
                cpu0 = procstat.cpu_seconds(router.pid)
                rec["max"] = overhead.run_wrk(url, lua, 2, a.max_conns, secs, log)
                cpu = procstat.cpu_seconds(router.pid) - cpu0
                n = rec["max"].get("requests") or 0
                # Ratio: the spread direct run and this router's run back to back (same threads,
                # same connections), so both see the same machine load.
                nt = res["ratio_threads"]
                fl.flush()
                rec["spread_direct"] = overhead.run_wrk(fl.urls[0], spread_lua, nt, a.max_conns, secs, log)
                fl.flush()
                rec["spread_router"] = overhead.run_wrk(url, lua, nt, a.max_conns, secs, log)
                d_rps, r_rps = rec["spread_direct"].get("rps"), rec["spread_router"].get("rps")
                rec["throughput_ratio"] = r_rps / d_rps if d_rps and r_rps else None
                rec["router_cpu_s"] = cpu
                rec["cpu_us_per_req"] = cpu * 1e6 / n if n else None
                rec["router_peak_rss_mb"] = procstat.peak_rss_mb(router.pid)
                d = res["direct"]["c1"]
                for p in ("p50", "p99"):
                    if rec["c1"].get(f"{p}_us") is not None and d.get(f"{p}_us") is not None:
                        rec[f"added_{p}_us"] = rec["c1"][f"{p}_us"] - d[f"{p}_us"]
                if not router.alive():
                    raise RuntimeError(f"router exited during wrk; log: {router.log_path}")
            except KeyboardInterrupt:
                raise
            except Exception as e:
                rec["error"] = f"{type(e).__name__}: {e}"
                print(f"[fail] overhead / {spec_r.name}: {rec['error']}", flush=True)
            finally:
                if router is not None:
                    router.stop()
            res["routers"].append(rec)
    finally:
        fl.stop()
    return res


# --- orchestration ------------------------------------------------------------------------------

def write_outputs(res: dict, out: Path, update_docs: bool) -> None:
    res = portable.tree(res)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=1))
    try:
        report.charts(res, out / "img")
        has_charts = True
    except ImportError:
        has_charts = False
    (out / "results.md").write_text(report.markdown(res, "img" if has_charts else None))
    if update_docs:
        if has_charts:
            report.charts(res, REPO / "docs" / "img")
        report.update_benchmarks_md(REPO / "docs" / "benchmarks.md", report.markdown(res, "img" if has_charts else None))


def run(a) -> int:
    out = Path(a.out or REPO / "target" / "compare" / dt.datetime.utcnow().strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    logs = out / "logs"
    selected = routers.select(a.only)
    bin_dir = runenv.build_binaries(a, logs)
    model_dir = textmodel.ensure(HERE / "model", REPO / "target" / "compare" / "text-model")
    selected, launch, peers = runenv.prepare_routers(a, selected, bin_dir, model_dir, logs)
    if not selected:
        raise SystemExit("nothing left to measure")
    res = {"meta": {
        "date": dt.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), "git": runenv.git_describe(), "machine": runenv.machine(),
        "size": a.size, "command": "python3 scripts/compare/compare.py " + " ".join(sys.argv[1:]),
        "sglr_version": peers["sglr_version"], "smg_version": peers["smg_version"],
        "routers": [{"name": r.name, "args": list(r.args)} for r in selected],
        "loadavg_start": os.getloadavg(), "binaries": runenv.describe_bins(bin_dir, a)},
        "runs": []}
    print(f"[compare] out={out} size={a.size} routers={', '.join(r.name for r in selected)}", flush=True)

    portable.register(a.trace, "$TRACE")
    wanted = [w.strip() for w in a.workloads.split(",") if w.strip()]
    wls = [w for w in workloads.build(a.size, Path(a.trace), a.seed, str(launch.model_dir)) if w.name in wanted]
    if a.overhead_only:
        wls = []
    # Workloads that share a fleet spec share the fleet (flushed between runs).
    fleets: list[tuple[fleet_mod.FleetSpec, list[workloads.Workload]]] = []
    for w in wls:
        for spec, group in fleets:
            if spec == w.fleet:
                group.append(w)
                break
        else:
            fleets.append((w.fleet, [w]))
    for spec, group in fleets:
        print(f"[fleet] {spec.describe()}", flush=True)
        fl = fleet_mod.Fleet(bin_dir / "sglang-mock", spec, launch.model_dir, logs / f"fleet-{len(res['runs'])}")
        try:
            for w in group:
                for r in selected:
                    t0 = time.monotonic()
                    rec = measure(r, w, fl, launch, bin_dir / "loadgen", out)
                    res["runs"].append(rec)
                    s = rec.get("summary") or {}
                    if not rec.get("error"):
                        print(f"[run] {w.name:6} {r.name:24} hit={report._f(s.get('hit_rate'), '.1%'):>6} "
                              f"ttft p50={report._f(s.get('ttft_p50_ms'), '.1f')} ms "
                              f"p99={report._f(s.get('ttft_p99_ms'), '.1f')} ms "
                              f"req/s={report._f(s.get('req_per_s'), '.1f')} "
                              f"cpu={rec.get('router_cpu_s', 0):.2f}s ({time.monotonic() - t0:.0f}s)", flush=True)
                    (out / "results.json").write_text(json.dumps(portable.tree(res), indent=1))
        finally:
            fl.stop()
        if a.no_reference:
            continue
        # Reference: the same load on ONE worker holding the whole fleet's KV and running
        # N times as fast, i.e. a single shared cache of the fleet's size (only its hit rate counts).
        cspec = spec.shared_cache()
        print(f"[fleet] reference: {cspec.describe()}", flush=True)
        cf = fleet_mod.Fleet(bin_dir / "sglang-mock", cspec, launch.model_dir, logs / f"reference-{len(res['runs'])}")
        try:
            for w in group:
                rec = measure(routers.REFERENCE, w, cf, launch, bin_dir / "loadgen", out)
                res["runs"].append(rec)
                if not rec.get("error"):
                    print(f"[run] {w.name:6} {'one shared cache':24} hit={report._f(rec['summary'].get('hit_rate'), '.1%'):>6}",
                          flush=True)
                (out / "results.json").write_text(json.dumps(portable.tree(res), indent=1))
        finally:
            cf.stop()
    res["meta"]["loadavg_before_overhead"] = os.getloadavg()
    if not a.no_overhead:
        res["overhead"] = overhead_run(a, selected, launch, bin_dir / "sglang-mock", out)
    res["meta"]["loadavg_end"] = os.getloadavg()
    write_outputs(res, out, a.update_docs)
    print((out / "results.md").read_text())
    print(f"[compare] results: {out / 'results.json'}  tables: {out / 'results.md'}", flush=True)
    return 1 if any(r.get("error") for r in res["runs"]) else 0


def repeats_table(a: argparse.Namespace) -> int:
    """`pressure-repeats`: docs/results/<name>.json from repeated pressure.json files."""
    if not a.repeats_name:
        raise SystemExit("pressure-repeats needs --repeats-name")
    results = [report.load(Path(p)) for p in a.results]
    meta = results[-1]["meta"]
    loads = [f"{r['meta']['loadavg_start'][0]:.1f}-{r['meta']['loadavg_end'][0]:.1f}" for r in results
             if r["meta"].get("loadavg_start") and r["meta"].get("loadavg_end")]
    cond = f"{meta.get('machine', '')}; {meta.get('binaries', '')}; load average (1 min) per run {', '.join(loads)}"
    out = REPO / "docs" / "results" / f"{a.repeats_name}.json"
    res = pressure_repeats.write(results, out, name=a.repeats_name, baseline=a.repeats_baseline,
                                 date=meta["date"], commit=meta["git"], conditions=cond)
    print(tables.render(res))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["docs"]:
        # Rendering only (standard library): no harness venv, no process started.
        import docs as docs_mod
        return docs_mod.main(argv[1:])
    a = parse_args(argv)
    venvs.reexec_in_harness_venv(Path(a.venv_root))
    procs.install_signal_handlers()
    try:
        if a.command == "pressure":
            return pressure_run.run(a)
        if a.command == "pd":
            return pressure_pd.run(a)
        if a.command == "pd-report":
            res = pressure_pd.merge([report.load(Path(p)) for p in a.results])
            out = Path(a.out) if a.out else REPO / "target" / "compare" / "pd-report"
            pressure_pd.write_outputs(res, out, a.update_docs)
            print((out / "pd.md").read_text())
            return 0
        if a.command == "pressure-repeats":
            return repeats_table(a)
        if a.command == "pressure-report":
            res = pressure_render.merge([report.load(Path(p)) for p in a.results])
            out = Path(a.out) if a.out else REPO / "target" / "compare" / "pressure-report"
            ok = pressure_render.write_outputs(res, out, a.update_docs)
            print((out / "pressure.md").read_text() if ok else "[pressure] no report")
            return 0 if ok else 1
        if a.command == "report":
            res = report.merge([report.load(Path(p)) for p in a.results])
            out = Path(a.out) if a.out else REPO / "target" / "compare" / "report"
            write_outputs(res, out, a.update_docs)
            print((out / "results.md").read_text())
            return 0
        return run(a)
    except KeyboardInterrupt:
        print("\n[compare] interrupted; stopping every process started", file=sys.stderr)
        return 130
    except SystemExit:
        raise
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        procs.stop_all()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
