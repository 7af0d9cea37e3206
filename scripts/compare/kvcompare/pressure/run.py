"""Runs the pressure suite: for each timing model, each fleet shape, each case and each router
one measured run (fresh router, flushed workers), then the shared-cache reference of each case;
writes `OUT/pressure.json` after every run and the report at the end."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from .. import fleet as fleet_mod
from .. import portable, routers, runenv
from ..measure import measure
from . import render, suite

HERE = Path(__file__).resolve().parent.parent.parent  # scripts/compare


def _help(binary: Path, *args: str) -> str:
    try:
        r = subprocess.run([str(binary), *args, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return r.stdout + r.stderr


def missing_features(bin_dir: Path, cases: list[suite.Case], timing_models: list[str]) -> list[str]:
    """What the suite needs from the binaries and they do not offer (the contract of issue 10:
    `sglang-mock --timing-model`, `loadgen --sim-speedup`, `loadgen rollout|tenants`,
    `loadgen agent --think-time-ms`)."""
    out = []
    mock = _help(bin_dir / "sglang-mock")
    if "--timing-model" not in mock:
        out.append(f"{bin_dir / 'sglang-mock'} has no --timing-model (needed for {','.join(timing_models)})")
    loadgen = _help(bin_dir / "loadgen")
    if "--sim-speedup" not in loadgen:
        out.append(f"{bin_dir / 'loadgen'} has no --sim-speedup")
    subs = {p.argv[0] for c in cases for p in c.parts}
    for sub in sorted(subs):
        h = _help(bin_dir / "loadgen", sub)
        if "Usage" not in h:
            out.append(f"{bin_dir / 'loadgen'} has no `{sub}` workload")
        elif sub == "agent" and "--think-time-ms" not in h:
            out.append(f"{bin_dir / 'loadgen'} agent has no --think-time-ms")
    return out


def run(a) -> int:
    out = runenv.out_dir(a, "pressure")
    logs = out / "logs"
    size = a.size
    tms = runenv.csv(a.timing_models)
    wanted = runenv.csv(a.workloads)
    # A workload runs at both capacities; a case key (`trace-over`) picks one.
    known = [*suite.WORKLOADS, *(f"{w}-{c}" for w in suite.WORKLOADS for c in ("fits", "over"))]
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise SystemExit(f"--workloads: unknown {unknown} (known: {', '.join(known)})")
    portable.register(a.trace, "$TRACE")
    cases = [c for c in suite.build(size, Path(a.trace), a.seed, a.trace_requests)
             if c.workload in wanted or c.key in wanted]
    selected = routers.select(a.only, routers.PRESSURE_QUICK if size == "quick" else routers.PRESSURE)
    bin_dir = runenv.build_binaries(a, logs)
    missing = missing_features(bin_dir, cases, tms)
    if missing:
        raise SystemExit("the binaries lack what the pressure suite needs:\n  " + "\n  ".join(missing))
    selected, launch, peers = runenv.prepare_routers(a, selected, bin_dir, HERE / "model", logs)
    if not selected:
        raise SystemExit("nothing left to measure")
    res = {"meta": {
        "suite": "pressure", "date": dt.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
        "git": runenv.git_describe(), "machine": runenv.machine(), "size": size, "timing_models": tms,
        "command": "python3 scripts/compare/compare.py " + " ".join(sys.argv[1:]),
        **peers, "routers": [{"name": r.name, "args": list(r.args)} for r in selected],
        "loadavg_start": os.getloadavg(), "binaries": runenv.describe_bins(bin_dir, a)},
        "runs": []}
    results = out / "pressure.json"
    print(f"[pressure] out={out} size={size} timing models={','.join(tms)} "
          f"routers={', '.join(r.name for r in selected)}", flush=True)
    t_start = time.monotonic()
    for tm in tms:
        groups: list[tuple[fleet_mod.FleetSpec, list[suite.Case]]] = []
        for c in cases:  # cases with the same fleet shape share the fleet (flushed between runs)
            for spec, group in groups:
                if spec == c.fleet:
                    group.append(c)
                    break
            else:
                groups.append((c.fleet, [c]))
        for spec, group in groups:
            spec = replace(spec, extra_args=[*spec.extra_args, "--timing-model", tm],
                           slow_workers=a.slow_workers, slow_factor=a.slow_factor)
            targets = [(spec, selected)]
            if not a.no_reference:
                targets.append((spec.shared_cache(), [routers.REFERENCE]))
            for fspec, rts in targets:
                print(f"[fleet] {fspec.describe()}", flush=True)
                fl = fleet_mod.Fleet(bin_dir / "sglang-mock", fspec, launch.model_dir,
                                     logs / f"fleet-{tm}-{len(res['runs'])}")
                try:
                    for c in group:
                        for r in rts:
                            t0 = time.monotonic()
                            base = {"workload": c.workload, "capacity": c.capacity, "timing_model": tm,
                                    "case": c.key, "kv_tokens_per_worker": c.fleet.max_total_tokens,
                                    "workers": c.fleet.workers, "fleet_kv_tokens": c.fleet_kv_tokens(),
                                    "working_set_tokens": c.working_set_tokens, "notes": c.notes}
                            rec = measure(r, f"{tm}-{c.key}", fl, launch, bin_dir / "loadgen", out, c.parts,
                                          c.timeout_s, base)
                            res["runs"].append(rec)
                            print(render.progress_line(rec, time.monotonic() - t0), flush=True)
                            results.write_text(json.dumps(portable.tree(res), indent=1))
                finally:
                    fl.stop()
    res["meta"]["loadavg_end"] = os.getloadavg()
    res["meta"]["wall_s"] = time.monotonic() - t_start
    results.write_text(json.dumps(portable.tree(res), indent=1))
    ok = render.write_outputs(res, out, a.update_docs)
    print((out / "pressure.md").read_text())
    bad = failed_rows(res)
    for b in bad:
        print(f"[pressure] row failed: {b}", flush=True)
    print(f"[pressure] results: {results}  report: {out / 'pressure.md'}  ({res['meta']['wall_s']:.0f} s)",
          flush=True)
    return 0 if ok and not bad else 1


def failed_rows(res: dict) -> list[str]:
    """Rows that did not run, or ran without a single ok request (in any of their loadgen parts)."""
    bad = []
    for r in res.get("runs", []):
        name = f"{r.get('timing_model')} {r.get('case')} {r.get('router')}"
        if r.get("error"):
            bad.append(f"{name}: {r['error'].splitlines()[0]}")
            continue
        parts = [p["summary"] for p in (r.get("parts") or {}).values()] or [r.get("summary") or {}]
        if any(not (p.get("ok") or 0) > 0 for p in parts):
            bad.append(f"{name}: no ok request")
    return bad
