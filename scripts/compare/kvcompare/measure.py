"""One measured run: start a router in front of a fleet (or none, for the shared-cache
reference), flush the workers, run one or more `loadgen` processes at once, and record what
they and the fleet report (summary, per-request records, router CPU/RSS, worker balance,
kvrouter's KV evidence, the router's warnings). Used by the side-by-side and pressure suites."""

from __future__ import annotations

import os
import re
import resource
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from . import fleet as fleet_mod
from . import procs, procstat, routers, workloads

REQ_COUNTERS = ("sglang:num_requests_total", "sglang:request_count_total", "sglang:requests_total")
PROMPT_COUNTERS = ("sglang:prompt_tokens_total",)
CACHED_COUNTERS = ("sglang:cached_tokens_total", "sglang:cache_hit_tokens_total")
KV_COUNTERS = ("kvrouter_kv_events_received_total", "kvrouter_kv_predicted_hit_tokens_total",
               "kvrouter_kv_actual_hit_tokens_total", "kvrouter_sticky_moves_total")


@dataclass
class Part:
    """One loadgen process of a run (a run has one, the mixed workload two)."""
    name: str
    argv: list[str]          # loadgen subcommand + flags (no --url / --json / --records)
    records: bool = False    # also write --records (per-request JSON lines)


def measure(spec: routers.RouterSpec, tag_name: str, fleet: fleet_mod.Fleet, launch: routers.Launch,
            loadgen: Path, out: Path, parts: list[Part], timeout_s: float, rec: dict) -> dict:
    """Fills and returns `rec` (the caller's identifying keys kept). With one part the loadgen
    summary goes to rec["loadgen"] / rec["summary"]; with several, each part's to
    rec["parts"][name] and rec["summary"] is their token-weighted combination."""
    tag = f"{tag_name}-{spec.name.replace(' ', '-').replace(':', '')}"
    rec.update({"router": spec.name, "family": spec.family, "router_args": list(spec.args),
                "fleet": fleet.spec.describe()})
    if len(parts) == 1:
        rec["loadgen_args"] = parts[0].argv
    router = None
    try:
        if spec.family == "reference":  # loadgen straight at the one big worker, no router
            url = fleet.urls[0]
        else:
            router, url = routers.start(spec, fleet.urls, launch, tag, fleet.router_args())
        fleet.flush()
        before = fleet.scrape()
        cpu0 = procstat.cpu_seconds(router.pid) if router else 0.0
        fleet_cpu0 = sum(procstat.cpu_seconds(p.pid) for p in fleet.procs)
        # loadgen's CPU: the only children reaped during the run are the loadgen processes.
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        stall0 = procstat.host_stall()
        (out / "loadgen").mkdir(parents=True, exist_ok=True)
        running = []
        t0 = time.monotonic()
        for part in parts:
            ptag = tag if len(parts) == 1 else f"{tag}-{part.name}"
            js = out / "loadgen" / f"{ptag}.json"
            argv = [str(loadgen), *part.argv, "--url", url, "--json", str(js)]
            recs = out / "loadgen" / f"{ptag}.records.jsonl" if part.records else None
            if recs is not None:
                argv += ["--records", str(recs)]
            log = out / "logs" / f"loadgen-{ptag}.log"
            running.append((part, procs.Proc(f"loadgen-{part.name}", argv, log), js, recs, log, argv))
        deadline = t0 + timeout_s
        results = []
        for part, p, js, recs, log, argv in running:
            rc = p.wait_exit(max(1.0, deadline - time.monotonic()))
            results.append((part, rc, js, recs, log, argv))
        rec["wall_s"] = time.monotonic() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        rec["loadgen_cpu_s"] = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
        rec["fleet_cpu_s"] = sum(procstat.cpu_seconds(p.pid) for p in fleet.procs) - fleet_cpu0
        if router is not None:
            rec["router_cpu_s"] = procstat.cpu_seconds(router.pid) - cpu0
            rec["router_peak_rss_mb"] = procstat.peak_rss_mb(router.pid)
        # Cores the measured processes used together: at too high a speedup CPU contention
        # distorts the simulated clock, so the suite's speedups keep this well below the cores.
        rec["cores_used"] = (rec["loadgen_cpu_s"] + rec["fleet_cpu_s"] + rec.get("router_cpu_s", 0.0)) / max(
            rec["wall_s"], 1e-3)
        rec["loadavg_1m"] = os.getloadavg()[0]
        stall = procstat.stall_delta(stall0, procstat.host_stall())
        rec["host_memory_full_s"], rec["host_oom_kills"] = stall["memory_full_s"], stall["oom_kills"]
        if router is not None and not router.alive():
            raise RuntimeError(f"router exited during the run; log: {router.log_path}\n{router.tail()}")
        summaries = {}
        for part, rc, js, recs, log, argv in results:
            command = " ".join(shlex.quote(x) for x in argv)
            if rc != 0:
                raise RuntimeError(f"loadgen {part.name} exited {rc}; log: {log}")
            raw = workloads.load_summary(js)
            s = workloads.summarize(raw)
            if recs is not None and recs.exists():
                s.update(workloads.records_digest(recs))
            summaries[part.name] = s
            if len(parts) == 1:
                rec["command"], rec["loadgen"], rec["summary"] = command, raw, s
            else:
                rec.setdefault("parts", {})[part.name] = {"command": command, "loadgen_args": part.argv,
                                                          "loadgen": raw, "summary": s}
        if len(parts) > 1:  # latency from a streaming part (TTFT), makespan from a rollout part
            stream = next((p.name for p in parts if "--stream" in p.argv), None)
            mk = next((n for n, s in summaries.items() if s.get("makespan_mean_s") is not None), None)
            rec["summary"] = workloads.combine(summaries, latency_part=stream, makespan_part=mk)
        if spec.family == "kvrouter":  # evidence that KV mode ran on events (fresh router per run)
            m = fleet_mod.scrape_metrics(url)
            rec["router_kv_metrics"] = {k: m[k] for k in KV_COUNTERS if k in m}
            # Learned per-unit rates and speed factors (routing/kv/rates.rs), one series per unit.
            rec["router_unit_rates"] = fleet_mod.scrape_series(url, "kvrouter_kv_unit_")
            # How predictions turned out (crates/index calibration.rs): blocks booked, outcomes,
            # confirmation delays.
            rec["router_predictions"] = fleet_mod.scrape_series(url, "kvrouter_index_predict")
        after = fleet.scrape()
        reqs = fleet_mod.per_worker_delta(before, after, REQ_COUNTERS)
        if reqs and sum(reqs) > 0:
            rec["worker_requests"] = reqs
            rec["balance_max_over_mean"] = max(reqs) / (sum(reqs) / len(reqs))
        prompt = fleet_mod.per_worker_delta(before, after, PROMPT_COUNTERS)
        cached = fleet_mod.per_worker_delta(before, after, CACHED_COUNTERS)
        if prompt and cached and sum(prompt) > 0:
            rec["mock_hit_rate"] = sum(cached) / sum(prompt)
            if rec["summary"].get("hit_rate") is None:
                rec["summary"]["hit_rate"] = rec["mock_hit_rate"]
        if fleet.spec.prefill:  # PD: the prefill workers' own cache hits, and each role's balance
            pre = fleet.indexes("prefill")
            if prompt and cached and sum(prompt[i] for i in pre) > 0:
                rec["prefill_hit_rate"] = sum(cached[i] for i in pre) / sum(prompt[i] for i in pre)
            for role in ("prefill", "decode"):
                n = [reqs[i] for i in fleet.indexes(role)] if reqs else []
                if n and sum(n) > 0:
                    rec[f"{role}_balance_max_over_mean"] = max(n) / (sum(n) / len(n))
        fleet.check_alive()
    except KeyboardInterrupt:
        raise
    except Exception as e:  # one failing router must not sink the comparison
        rec["error"] = f"{type(e).__name__}: {e}"
        print(f"[fail] {tag_name} / {spec.name}: {rec['error']}", flush=True)
    finally:
        for item in locals().get("running", []):
            item[1].stop(grace=1.0)
        if router is not None:
            router.stop()
            warnings = router_warnings(router.log_path)
            if warnings:
                rec["router_warnings"] = warnings
    return rec


def router_warnings(log: Path, limit: int = 3) -> list[str]:
    """The router's first distinct WARN/ERROR lines (ANSI colours stripped), e.g. a mode fallback."""
    out: list[str] = []
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        line = re.sub(r"\x1b\[[0-9;]*m", "", line).strip()
        if (" WARN " in line or " ERROR " in line or "WARN" in line[:40]) and "SECURITY POSTURE" not in line:
            msg = line[:300]
            if msg not in out:
                out.append(msg)
            if len(out) >= limit:
                break
    return out
