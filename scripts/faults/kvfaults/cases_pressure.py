"""Connection pressure (issue 25, item 1), with the router's shipped defaults under a low
descriptor limit: 1.5x the router's connection slots held by slow connections (unfinished
request heads, reopened as soon as the router closes one) or by idle keep-alives (one request
each, then idle), while loadgen runs and a prober asks `/health` every 100 ms on a new
connection. Target: every good request (loadgen's and the probes) served, within 5 s p99
throughout; the router warns that the limit tripped."""

from __future__ import annotations

from . import attacks, records
from .caselib import Ctx, _stop, expect, finish, fleet, load, wait_in_flight
from .rig import Router

TARGET_P99_S = 5.0


def slots(nofile: int) -> int:
    """The router's `max_connections = 0` for a descriptor limit (config/limits.rs)."""
    return max((nofile - 64) // 2, 16)


def _p99(xs: list[float]) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(0.99 * len(xs)))], 3)


def _case(ctx: Ctx, kind: str, nofile: int) -> dict:
    n = slots(nofile) * 3 // 2
    tag = f"pressure-{kind}-{nofile}"
    what = ("unfinished request heads, reopened when closed" if kind == "slow"
            else "idle keep-alive connections (one request each)")
    row = {"case": f"connection pressure: {kind}, ulimit -n {nofile}",
           "fault": f"{n} {what} (1.5x the {slots(nofile)} slots) under ulimit -n {nofile}, shipped defaults"}
    mocks = fleet(ctx, tag)
    router = flood = prober = None
    try:
        attacks.raise_nofile(n + 512)
        router = Router(ctx.b("router"), [m.url for m in mocks], ctx.out / "logs" / tag / "router.log", nofile=nofile)
        row["rss_before_mb"] = router.rss_mb()
        m0 = router.metrics()
        prober = attacks.Prober(router.url)
        flood = attacks.ConnFlood(router.url, n, kind, reopen=(kind == "slow"))
        ld = load(ctx, router, tag, stream=False)
        wait_in_flight(ctx, ld, lambda: True, frac=0.1)
        fault = ld.now()
        flood.start()
        prober.start()
        flood.ready.wait(60)
        row["flood_opened_in_s"] = round(ld.now() - fault, 3)
        row = finish(row, ctx, ld, router, m0, fault)
        prober.stop()
        flood.stop()
        recs = records.load(ctx.out / f"{tag}.records.jsonl")
        e2e = [records.e2e_s(r, ctx.size.speedup) for r in recs if r.get("status") == "ok"]
        row["requests_p99_s"] = _p99(e2e)
        row["requests_max_s"] = round(max(e2e), 3) if e2e else None
        row["probes"] = len(prober.latencies)
        row["probes_failed"] = prober.failed
        row["probe_p99_s"] = _p99(prober.latencies)
        row["probe_max_s"] = round(max(prober.latencies), 3) if prober.latencies else None
        row["flood_opened"] = flood.opened
        row["flood_closed_by_router"] = flood.closed_by_peer
        row["flood_connect_failed"] = flood.connect_failed
        log = router.proc.log_path.read_text(errors="replace") if router.proc.log_path.exists() else ""
        warned = log.count("max_connections reached")
        row["limit_warnings"] = warned
        failed = row["client"]["failed"]
        return expect(row,
                      (failed == 0, f"{failed} good requests failed"),
                      (row["requests_p99_s"] is not None and row["requests_p99_s"] <= TARGET_P99_S,
                       f"good requests p99 {row['requests_p99_s']} s (target <= {TARGET_P99_S} s)"),
                      (row["probe_p99_s"] is not None and row["probe_p99_s"] <= TARGET_P99_S,
                       f"/health p99 {row['probe_p99_s']} s (target <= {TARGET_P99_S} s)"),
                      (prober.failed == 0, f"{prober.failed} probes failed"),
                      (warned >= 1, "the router never warned that max_connections tripped"))
    finally:
        for t in (prober, flood):
            if t is not None and t.is_alive():
                t.stop()
        _stop(router, mocks)


CASES = {
    f"pressure-{kind}-{nofile}": (lambda ctx, kind=kind, nofile=nofile: _case(ctx, kind, nofile))
    for nofile in (256, 1024) for kind in ("slow", "idle")
}
