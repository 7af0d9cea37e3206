#!/usr/bin/env python3
"""Shared predictions across router replicas (kvrouter issue 13), measured: the same
`loadgen grpo` through 1 kvrouter replica and through 3 replicas behind a round-robin TCP
balancer (HAProxy `mode tcp`, `balance roundrobin`), with shared predictions on and off.
Reports the fleet's prefix hit rate (mocks' cached / prompt tokens), TTFT p50 / p99, CPU
seconds per replica and the sharing counters (published, applied, seconds spent applying).

Needs release binaries (`cargo build --release -p kvrouter -p kvrouter-sim --bins`),
`nats-server` (scripts/test installs it into target/test-venv/bin) and `haproxy` on PATH.

    python3 scripts/replicas/replicas.py --out /tmp/replicas [--repeats 3]

Stdlib only; reuses scripts/compare/kvcompare (processes, fleet, /proc CPU)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO / "scripts" / "compare"))

from kvcompare import fleet as fleet_mod  # noqa: E402
from kvcompare import httpc, measure, presets, procs, procstat, routers, workloads  # noqa: E402

MODEL_DIR = REPO / "scripts" / "compare" / "model"
# The default fleet and workload: `[replicas]` of workloads/presets.toml (the README demo's GRPO).
FLEET = presets.suite("replicas", "fleet")
SHARING = ("kvrouter_shared_predictions_published_total", "kvrouter_shared_predictions_applied_total",
           "kvrouter_shared_predictions_dropped_total", "kvrouter_shared_predictions_apply_seconds_total",
           "kvrouter_shared_predictions_messages_total")
# name -> (replicas, extra router flags; {nats} is replaced by the NATS URL)
# "blind off": rendezvous placement of blind requests off (`--kv-blind-threshold 0`), the cost
# model's random tie-break as before it; those rows are the A/B baseline, interleaved.
# The rows without "blind off" turn the rule on (`--kv-blind-threshold 0.5`; off by default).
BLIND_OFF = ["--kv-blind-threshold", "0"]
BLIND_ON = ["--kv-blind-threshold", "0.5"]
SCENARIOS = {
    "1 replica": (1, BLIND_ON),
    "3 replicas, sharing off": (3, ["--nats-url", "{nats}", "--publish-events", "--share-predictions=false",
                                    *BLIND_ON]),
    "3 replicas, sharing on": (3, ["--nats-url", "{nats}", "--publish-events", *BLIND_ON]),
    "1 replica, blind off": (1, BLIND_OFF),
    "3 replicas, sharing off, blind off": (3, ["--nats-url", "{nats}", "--publish-events", "--share-predictions=false",
                                               *BLIND_OFF]),
    "3 replicas, sharing on, blind off": (3, ["--nats-url", "{nats}", "--publish-events", *BLIND_OFF]),
}


def start_nats(bin_path: str, log_dir: Path) -> tuple[procs.Proc, str]:
    port = procs.free_port()
    p = procs.Proc("nats", [bin_path, "-a", "127.0.0.1", "-p", str(port)], log_dir / "nats.log")

    def up() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            return False
    httpc.wait_until(up, 15, "nats-server to accept connections", proc=p)
    return p, f"nats://127.0.0.1:{port}"


def start_router(bin_dir: Path, workers: list[str], flags: list[str], name: str, log_dir: Path):
    argv = [str(bin_dir / "router"), "--mode", "kv", "--page-size", "16", "--host", "127.0.0.1",
            "--port", "0", "--log-level", "warn", *flags, "--worker-urls", *workers]
    p = procs.Proc(name, argv, log_dir / f"{name}.log")
    url = p.wait_listening(60)
    routers._wait_routable(p, url, len(workers))
    return p, url


def start_haproxy(backends: list[str], log_dir: Path, name: str) -> tuple[procs.Proc, str]:
    port = procs.free_port()
    servers = "\n".join(f"    server r{i} {u.split('://', 1)[1]}" for i, u in enumerate(backends))
    cfg = f"""global
    maxconn 4096
defaults
    mode tcp
    timeout connect 5s
    timeout client 600s
    timeout server 600s
frontend fe
    bind 127.0.0.1:{port}
    default_backend be
backend be
    balance roundrobin
{servers}
"""
    path = log_dir / f"{name}.cfg"
    path.write_text(cfg)
    p = procs.Proc(name, ["haproxy", "-db", "-f", str(path)], log_dir / f"{name}.log")
    url = f"http://127.0.0.1:{port}"
    httpc.wait_until(lambda: httpc.request("GET", url + "/health", timeout=2)[0] == 200, 30,
                     "haproxy to forward /health", proc=p)
    return p, url


def delta(before: list[dict], after: list[dict], name: str) -> list[float]:
    """Per worker after - before of counter `name` (absent = 0: a mock exports a counter once used)."""
    return [a.get(name, 0.0) - b.get(name, 0.0) for b, a in zip(before, after)]


def lag_buckets(url: str) -> dict[float, float]:
    """`kvrouter_shared_predictions_lag_seconds` buckets of a router: le -> cumulative count."""
    status, body = httpc.request("GET", url + "/metrics", timeout=5)
    out: dict[float, float] = {}
    for line in body.decode("utf-8", "replace").splitlines() if status == 200 else []:
        if line.startswith("kvrouter_shared_predictions_lag_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[float("inf") if le == "+Inf" else float(le)] = float(line.rsplit(None, 1)[1])
    return out


def lag_quantile(b0: list[dict], b1: list[dict], q: float) -> float | None:
    """Upper bucket bound of the q-quantile of the lag observed during the run, all replicas."""
    tot: dict[float, float] = {}
    for x0, x1 in zip(b0, b1):
        for le, v in x1.items():
            tot[le] = tot.get(le, 0.0) + v - x0.get(le, 0.0)
    n = tot.get(float("inf"), 0.0)
    if n <= 0:
        return None
    return next(le for le in sorted(tot) if tot[le] >= q * n)


def group_digest(path: Path) -> dict:
    """From loadgen's records: distinct workers per GRPO group (tag `g<G>/s<S>`), and cold
    prefills (requests that found less than half of their prompt cached)."""
    groups: dict[str, set] = {}
    cold = 0
    for line in path.read_text().splitlines():
        r = json.loads(line)
        groups.setdefault(r["tag"].split("/", 1)[0], set()).add(r.get("worker"))
        if (r.get("cached_tokens") or 0) * 2 < (r.get("prompt_tokens") or r.get("prompt_len") or 0):
            cold += 1
    n = max(len(groups), 1)
    return {"workers_per_group": sum(len(w) for w in groups.values()) / n, "cold_prefills": cold}


def run_one(a, name: str, fleet, nats_url: str, run_idx: int, log_dir: Path, out: Path) -> dict:
    n, flags = SCENARIOS[name]
    flags = [f.replace("{nats}", nats_url) for f in flags] + list(a.router_flag or [])
    tag = f"{name.replace(' ', '').replace(',', '-')}-{run_idx}"
    started = []
    rec: dict = {"scenario": name, "run": run_idx, "router_flags": flags}
    try:
        reps = [start_router(a.bin_dir, fleet.urls, flags, f"router-{tag}-{i}", log_dir) for i in range(n)]
        started += [p for p, _ in reps]
        lb, url = start_haproxy([u for _, u in reps], log_dir, f"haproxy-{tag}")
        started.append(lb)
        fleet.flush()
        time.sleep(0.5)  # the flush's cleared events reach every replica
        before = fleet.scrape()
        cpu0 = [procstat.cpu_seconds(p.pid) for p, _ in reps]
        m0 = [fleet_mod.scrape_metrics(u) for _, u in reps]
        lag0 = [lag_buckets(u) for _, u in reps]
        js = out / f"loadgen-{tag}.json"
        recs = out / f"loadgen-{tag}.records.jsonl"
        argv = [str(a.bin_dir / "loadgen"), *a.workload, "--url", url, "--json", str(js), "--records", str(recs)]
        t0 = time.monotonic()
        rc = procs.run(argv, log_dir / f"loadgen-{tag}.log", timeout=a.timeout)
        rec["wall_s"] = time.monotonic() - t0
        if rc != 0:
            raise RuntimeError(f"loadgen exited {rc}; log {log_dir / f'loadgen-{tag}.log'}")
        rec["loadavg_1m"] = os.getloadavg()[0]
        rec["router_cpu_s"] = [procstat.cpu_seconds(p.pid) - c for (p, _), c in zip(reps, cpu0)]
        m1 = [fleet_mod.scrape_metrics(u) for _, u in reps]
        lag1 = [lag_buckets(u) for _, u in reps]
        rec["lag_p50_s"] = lag_quantile(lag0, lag1, 0.5)
        rec["lag_p99_s"] = lag_quantile(lag0, lag1, 0.99)
        rec["blind_placements"] = sum(b.get("kvrouter_kv_blind_total", 0.0) - a_.get("kvrouter_kv_blind_total", 0.0)
                                      for a_, b in zip(m0, m1))
        rec["sharing"] = [{k.removeprefix("kvrouter_shared_predictions_"): b.get(k, 0.0) - a_.get(k, 0.0)
                           for k in SHARING} for a_, b in zip(m0, m1)]
        after = fleet.scrape()
        prompt = delta(before, after, "sglang:prompt_tokens_total")
        cached = delta(before, after, "sglang:cached_tokens_total")
        rec["hit_rate"] = sum(cached) / sum(prompt) if sum(prompt) else None
        s = workloads.summarize(json.loads(js.read_text()))
        rec.update({k: s.get(k) for k in ("requests", "ok", "errors", "ttft_p50_ms", "ttft_p99_ms", "e2e_p50_ms")})
        rec.update(group_digest(recs))
        rec["worker_requests"] = delta(before, after, measure.REQ_COUNTERS[0])
    finally:
        for p in reversed(started):
            p.stop()
    return rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin-dir", type=Path, default=REPO / "target" / "release")
    ap.add_argument("--nats-server", default=shutil.which("nats-server")
                    or str(REPO / "target" / "test-venv" / "bin" / "nats-server"))
    ap.add_argument("--workers", type=int, default=FLEET["workers"])
    ap.add_argument("--speedup", type=float, default=FLEET["speedup"])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--only", action="append", choices=list(SCENARIOS), help="scenario(s) to run")
    ap.add_argument("--router-flag", action="append", metavar="FLAG",
                    help="extra flag for every router, e.g. --router-flag=--kv-balance-factor=1.5 (repeatable)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/kvrouter-replicas"))
    ap.add_argument("workload", nargs="*", help="loadgen argv (default: [replicas] of workloads/presets.toml)")
    a = ap.parse_args()
    if not a.workload:
        a.workload = presets.replicas_argv()
    if not shutil.which("haproxy"):
        raise SystemExit("haproxy not on PATH (Debian: apt-get install -y haproxy)")
    log_dir = a.out / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    procs.install_signal_handlers()
    spec = fleet_mod.FleetSpec(workers=a.workers, page_size=16, speedup=a.speedup,
                                max_total_tokens=FLEET["max_total_tokens"])
    results = []
    nats = fleet = None
    try:
        nats, nats_url = start_nats(a.nats_server, log_dir)
        fleet = fleet_mod.Fleet(a.bin_dir / "sglang-mock", spec, MODEL_DIR, log_dir)
        for r in range(a.repeats):
            for name in a.only or list(SCENARIOS):
                rec = run_one(a, name, fleet, nats_url, r, log_dir, a.out)
                results.append(rec)
                print(json.dumps(rec), flush=True)
    finally:
        if fleet is not None:
            fleet.stop()
        if nats is not None:
            nats.stop()
        procs.stop_all()
    doc = {"fleet": spec.describe(), "workload": a.workload, "results": results}
    (a.out / "replicas.json").write_text(json.dumps(doc, indent=1))
    print(f"\n{'scenario':36} {'hit rate':>8} {'TTFT p50':>9} {'TTFT p99':>9} {'CPU s/replica':>14} {'apply s':>8}"
          f" {'workers/group':>13} {'cold':>5} {'hit min-max':>12} {'blind':>6}")
    for name in a.only or list(SCENARIOS):
        rs = [r for r in results if r["scenario"] == name]
        med = lambda k: statistics.median(r[k] for r in rs if r.get(k) is not None)  # noqa: E731
        cpu = statistics.mean(statistics.mean(r["router_cpu_s"]) for r in rs)
        apply_s = statistics.mean(statistics.mean(s["apply_seconds_total"] for s in r["sharing"]) for r in rs)
        print(f"{name:36} {med('hit_rate'):8.3f} {med('ttft_p50_ms'):9.1f} {med('ttft_p99_ms'):9.1f} "
              f"{cpu:14.2f} {apply_s:8.3f} {med('workers_per_group'):13.2f} {med('cold_prefills'):5.1f} "
              f"{min(r['hit_rate'] for r in rs):5.3f}-{max(r['hit_rate'] for r in rs):5.3f} "
              f"{statistics.median(r.get('blind_placements', 0) for r in rs):6.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
