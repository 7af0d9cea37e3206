"""The fault cases. Each starts its own fleet and router, runs loadgen, injects one fault, and
returns one result row: what the client saw (loadgen records), recovery times, the router's RSS,
the router counters that show the mechanism, and the invariants checked (`violations`)."""

from __future__ import annotations

import os
import shutil
import signal
import time

from kvcompare import httpc, prom

from . import attacks
# FULL and QUICK are re-exported: faults.py reads cases.QUICK / cases.FULL.
from .caselib import (FULL, QUICK, Ctx, _stop, counters, expect, finish, fleet, load,  # noqa: F401
                      wait_in_flight)
from .rig import FAST_HEALTH, Load, Mock, Nats, Router, poll_until


def case_worker_killed(ctx: Ctx) -> dict:
    row = {"case": "worker killed mid-stream", "fault": "SIGKILL one mock while it streams; restart it on its port"}
    mocks = fleet(ctx, "killed")
    router = None
    try:
        victim = mocks[0]
        router = Router(ctx.b("router"), [m.url for m in mocks], ctx.out / "logs" / "killed" / "router.log", FAST_HEALTH)
        row["rss_before_mb"] = router.rss_mb()
        m0 = router.metrics()
        ld = load(ctx, router, "killed")
        wait_in_flight(ctx, ld, lambda: victim.running() > 0)
        victim.kill()
        fault = ld.now()
        row["unhealthy_after_s"] = poll_until(lambda: router.worker_healthy(victim.url) is False, 20)
        time.sleep(max(0.0, ctx.size.hold_s - (ld.now() - fault)))
        t_restart = ld.now()
        victim.start()
        back = poll_until(lambda: router.healthy_workers() >= len(mocks), 30)
        row["all_healthy_after_s"] = None if back is None else round(t_restart - fault + back, 3)
        return finish(row, ctx, ld, router, m0, fault, victim.url)
    finally:
        _stop(router, mocks)


def case_worker_frozen(ctx: Ctx) -> dict:
    row = {"case": "worker frozen", "fault": "SIGSTOP one mock while it streams, SIGCONT after the hold"}
    mocks = fleet(ctx, "frozen")
    router = None
    victim = mocks[0]
    try:
        router = Router(ctx.b("router"), [m.url for m in mocks], ctx.out / "logs" / "frozen" / "router.log", FAST_HEALTH)
        row["rss_before_mb"] = router.rss_mb()
        m0 = router.metrics()
        ld = load(ctx, router, "frozen")
        wait_in_flight(ctx, ld, lambda: victim.running() > 0)
        victim.signal(signal.SIGSTOP)
        fault = ld.now()
        row["unhealthy_after_s"] = poll_until(lambda: router.worker_healthy(victim.url) is False, 30)
        time.sleep(max(0.0, ctx.size.hold_s - (ld.now() - fault)))
        t_cont = ld.now()
        victim.signal(signal.SIGCONT)
        back = poll_until(lambda: router.healthy_workers() >= len(mocks), 30)
        row["all_healthy_after_s"] = None if back is None else round(t_cont - fault + back, 3)
        return finish(row, ctx, ld, router, m0, fault, victim.url)
    finally:
        victim.signal(signal.SIGCONT)
        _stop(router, mocks)


def index_vs_fleet(router: Router, mocks: list[Mock]) -> dict[str, int]:
    """Per worker: router index blocks minus the blocks the mock really holds (0 = agree)."""
    out = {}
    for m in mocks:
        pages = m.resident_pages()
        out[m.name] = router.unit_blocks(m.url) - (pages or 0)
    return out


def case_worker_restarted(ctx: Ctx) -> dict:
    row = {"case": "worker restarted quickly",
           "fault": "SIGKILL one mock and start it again on the same ports at once (inside one 5 s health interval)"}
    mocks = fleet(ctx, "restarted")
    router = None
    victim = mocks[0]
    flags = ["--health-check-interval-secs", "5", "--health-failure-threshold", "2"]
    try:
        router = Router(ctx.b("router"), [m.url for m in mocks], ctx.out / "logs" / "restarted" / "router.log", flags)
        row["rss_before_mb"] = router.rss_mb()
        m0 = router.metrics()
        ld = load(ctx, router, "restarted")
        wait_in_flight(ctx, ld, lambda: router.unit_blocks(victim.url) > 0, frac=0.4)
        row["victim_blocks_before"] = router.unit_blocks(victim.url)
        victim.kill()
        fault = ld.now()
        victim.start()
        row["restart_took_s"] = round(ld.now() - fault, 3)
        row["victim_seen_unhealthy"] = router.worker_healthy(victim.url) is False
        row = finish(row, ctx, ld, router, m0, fault, victim.url)
        # Quiescent: the index must hold exactly what each mock holds (no stale blocks of the
        # killed process). Events of the last responses may still be in flight: poll.
        settle = poll_until(lambda: all(v == 0 for v in index_vs_fleet(router, mocks).values()), 10, 0.2)
        diff = index_vs_fleet(router, mocks)
        row["index_minus_mock_blocks"] = diff
        row["index_agrees_after_s"] = settle
        if diff.get(victim.name, 0) > 0:
            row["violations"].append(f"index keeps {diff[victim.name]} stale blocks of the restarted worker")
        return row
    finally:
        _stop(router, mocks)


def case_nats_restarted(ctx: Ctx) -> dict:
    row = {"case": "nats-server restarted",
           "fault": "SIGKILL nats-server (JetStream) and start it on the same port and store; relay router + consumer router"}
    if ctx.nats_bin is None:
        row["skipped"] = "no nats-server (run scripts/test once, or pass --nats-server)"
        row["violations"] = []
        return row
    store = ctx.out / "nats-store"
    shutil.rmtree(store, ignore_errors=True)
    nats = Nats(ctx.nats_bin, store, ctx.out / "logs" / "nats")
    mocks = fleet(ctx, "nats")
    relay = consumer = None
    js = ["--nats-url", nats.url, "--nats-jetstream"]
    try:
        urls = [m.url for m in mocks]
        relay = Router(ctx.b("router"), urls, ctx.out / "logs" / "nats" / "relay.log", FAST_HEALTH + js + ["--publish-events"])
        consumer = Router(ctx.b("router"), urls, ctx.out / "logs" / "nats" / "consumer.log", FAST_HEALTH + js)
        row["rss_before_mb"] = relay.rss_mb()
        m0, c0 = relay.metrics(), consumer.metrics()
        ld = load(ctx, relay, "nats")
        wait_in_flight(ctx, ld, lambda: relay.index().get("resident_blocks", 0) > 0)
        nats.kill()
        fault = ld.now()
        time.sleep(min(1.0, ctx.size.hold_s))
        nats.start()
        row["nats_down_s"] = round(ld.now() - fault, 3)
        row = finish(row, ctx, ld, relay, m0, fault)
        t_end = time.monotonic()
        same = poll_until(lambda: _digest(relay) is not None and _digest(relay) == _digest(consumer), 60, 0.2)
        row["consumer_equals_relay_after_load_s"] = same
        row["consumer_counters"] = counters(c0, consumer.metrics())
        row["consumer_rss_after_mb"] = consumer.rss_mb()
        if same is None:
            row["violations"].append(f"consumer index digest differs from the relay's {time.monotonic() - t_end:.0f} s after the load")
        if not consumer.alive():
            row["violations"].append("consumer router died")
        return row
    finally:
        _stop(consumer, [])
        _stop(relay, mocks)
        nats.stop()


def _digest(r: Router):
    return r.index().get("digest")


SIGTERM_TOKENS = 512  # streams of about a second of wall time each, so the drain has work


def case_router_sigterm(ctx: Ctx) -> dict:
    grace = 30
    row = {"case": "router SIGTERM under load",
           "fault": f"SIGTERM the router while {SIGTERM_TOKENS}-token streams run (--shutdown-grace-period-secs {grace})",
           "router_must_live": False}
    mocks = fleet(ctx, "sigterm")
    router = None
    try:
        router = Router(ctx.b("router"), [m.url for m in mocks], ctx.out / "logs" / "sigterm" / "router.log",
                        FAST_HEALTH + ["--shutdown-grace-period-secs", str(grace)])
        row["rss_before_mb"] = router.rss_mb()
        m0 = router.metrics()
        ld = load(ctx, router, "sigterm", max_new_tokens=SIGTERM_TOKENS)
        wait_in_flight(ctx, ld, lambda: sum(m.running() for m in mocks) >= 2, frac=0.5)
        row["rss_at_signal_mb"] = router.rss_mb()
        in_flight = prom.total(router.metrics(), "kvrouter_worker_in_flight")
        t0 = time.monotonic()
        os.kill(router.pid, signal.SIGTERM)
        fault = ld.now()
        # The signal is handled asynchronously: poll until /readiness stops answering 200.
        last = {"status": 200}

        def not_ready() -> bool:
            last["status"] = httpc.request("GET", router.url + "/readiness", timeout=1)[0]
            return last["status"] != 200
        row["not_ready_after_s"] = poll_until(not_ready, 5, 0.005)
        row["readiness_after_signal"] = last["status"] or "refused"
        row["router_in_flight_at_signal"] = in_flight
        rc = router.proc.wait_exit(grace + 15)
        row["exit_code"] = rc
        row["drain_s"] = round(time.monotonic() - t0, 3)
        row = finish(row, ctx, ld, router, m0, fault, expect_all=True)
        s = row["client"]
        return expect(row,
                      (not s["failed_after_head"],
                       f"{s['failed_after_head']} responses cut after their head during the drain"),
                      (s.get("in_flight_at_fault", 0) > 0,
                       "no request was in flight at the signal: the drain was not exercised"),
                      (rc == 0, f"router exited {rc} after SIGTERM"))
    finally:
        _stop(router, mocks)


# The router's default `--request-head-timeout-secs` (a silent connection is closed after it).
HEAD_TIMEOUT_S = 10


def case_slowloris(ctx: Ctx) -> dict:
    s = ctx.size
    row = {"case": "slowloris, low descriptor limit",
           "fault": f"{s.slow_conns} unfinished request heads held open; router under ulimit -n {s.nofile}, "
                    f"shipped defaults (--request-head-timeout-secs {HEAD_TIMEOUT_S})"}
    mocks = fleet(ctx, "slowloris")
    router = None
    attack = None
    try:
        attacks.raise_nofile(s.slow_conns + 256)
        router = Router(ctx.b("router"), [m.url for m in mocks], ctx.out / "logs" / "slowloris" / "router.log",
                        nofile=s.nofile)
        row["rss_before_mb"] = router.rss_mb()
        m0 = router.metrics()
        ld = load(ctx, router, "slowloris", stream=False)
        wait_in_flight(ctx, ld, lambda: True, frac=0.2)
        fault = ld.now()
        # Beyond the router's slots, each new connection closes the oldest silent one: times
        # count from the first connection.
        attack = attacks.Slowloris(router.url, s.slow_conns)
        row["attack_opened_in_s"] = round(ld.now() - fault, 3)
        row["attack_connected"] = len(attack.socks)
        row["attack_connect_failed"] = attack.connect_failed
        row["rss_under_attack_mb"] = router.rss_mb()
        ok = poll_until(lambda: httpc.request("GET", router.url + "/health", timeout=1)[0] == 200,
                        3 * HEAD_TIMEOUT_S + 20, 0.2)
        row["health_ok_after_s"] = None if ok is None else round(ld.now() - fault, 3)
        closed = poll_until(lambda: attack.closed_by_peer() >= len(attack.socks), 3 * HEAD_TIMEOUT_S + 20, 0.5)
        row["attack_closed_by_router"] = attack.closed_by_peer()
        row["all_closed_after_s"] = None if closed is None else round(ld.now() - fault, 3)
        row = finish(row, ctx, ld, router, m0, fault)
        if row["health_ok_after_s"] is None:
            row["violations"].append("router never answered /health while the slow connections were held")
        return row
    finally:
        if attack is not None:
            attack.close()
        _stop(router, mocks)


def case_stalled_uploads(ctx: Ctx) -> dict:
    s = ctx.size
    length = s.upload_mib << 20
    row = {"case": "stalled uploads",
           "fault": f"{s.uploads} clients announce {s.upload_mib} MiB, send all but 1 MiB and stall; one announces "
                    f"300 MiB; --body-read-timeout-secs {s.body_timeout_s} (shortened from the default 30 s so the "
                    f"case ends sooner; the stall is caught by the idle timeout either way)"}
    mocks = fleet(ctx, "uploads")
    router = None
    try:
        router = Router(ctx.b("router"), [m.url for m in mocks], ctx.out / "logs" / "uploads" / "router.log",
                        ["--body-read-timeout-secs", str(s.body_timeout_s)])
        rss0 = router.rss_mb() or 0.0
        row["rss_before_mb"] = rss0
        m0 = router.metrics()
        ld = load(ctx, router, "uploads", stream=False)
        wait_in_flight(ctx, ld, lambda: True, frac=0.2)
        fault = ld.now()
        big = attacks.StalledUpload(router.url, 300 << 20, 0, wait_s=10)
        ups = [attacks.StalledUpload(router.url, length, length - (1 << 20), wait_s=s.body_timeout_s + 30)
               for _ in range(s.uploads)]
        for u in [big, *ups]:
            u.start()
        peak = rss0
        while any(u.is_alive() for u in ups):
            peak = max(peak, router.rss_mb() or 0.0)
            time.sleep(0.1)
        big.join(10)
        row["rss_peak_mb"] = peak
        row["upload_status"] = [u.status for u in ups]
        row["upload_answered_after_s"] = [u.answered_after_s for u in ups]
        row["oversized_status"] = big.status
        time.sleep(1.0)
        row["rss_after_uploads_mb"] = router.rss_mb()
        # Stated bounds: while bodies arrive, at most what was sent plus 64 MiB; afterwards, the
        # partial bodies are freed (within 64 MiB of the start).
        row["bound_peak_mb"] = round(rss0 + s.uploads * s.upload_mib + 64, 1)
        row["bound_after_mb"] = round(rss0 + 64, 1)
        row = finish(row, ctx, ld, router, m0, fault)
        return expect(row,
                      (peak <= row["bound_peak_mb"], f"RSS peak {peak} MiB above the bound {row['bound_peak_mb']}"),
                      ((row["rss_after_uploads_mb"] or 0) <= row["bound_after_mb"],
                       f"RSS after the uploads {row['rss_after_uploads_mb']} MiB above {row['bound_after_mb']}"),
                      (all(st == 408 for st in row["upload_status"]),
                       f"stalled uploads answered {row['upload_status']} (expected 408)"),
                      (big.status == 413, f"oversized upload answered {big.status} (expected 413)"))
    finally:
        _stop(router, mocks)


def case_event_flood(ctx: Ctx) -> dict:
    s = ctx.size
    capacity = 1024
    cap = capacity // 16 + capacity // 16 // 10 + 64  # index/cap.rs unit_cap_blocks
    row = {"case": "event flood from one worker",
           "fault": f"a worker advertising {capacity} KV tokens (cap {cap} entries) publishes the events of a "
                    f"2^20-token mock fed {s.flood_requests} distinct prompts directly"}
    mocks = fleet(ctx, "flood", s.workers - 1)
    source = Mock(ctx.b("sglang-mock"), "flood-source", ctx.out / "logs" / "flood", 0)
    front = attacks.CappedFront(source.url, capacity)
    router = None
    try:
        router = Router(ctx.b("router"), [m.url for m in mocks] + [front.url],
                        ctx.out / "logs" / "flood" / "router.log", FAST_HEALTH)
        row["rss_before_mb"] = router.rss_mb()
        row["index_memory_before_bytes"] = router.index().get("memory_bytes")
        m0 = router.metrics()
        ld = load(ctx, router, "flood")
        wait_in_flight(ctx, ld, lambda: True, frac=0.2)
        fault = ld.now()
        flood = Load(ctx.b("loadgen"), source.url, ctx.out, "flood-source", s.flood_requests, 1000, 1,
                     stream=False, max_new_tokens=4, seed=7, tenants=s.flood_requests, system_len=(512, 2048))
        peak = 0
        while flood.proc.alive():
            peak = max(peak, router.unit_blocks(front.url))
            time.sleep(0.05)
        frecs = flood.wait()
        row["flood_requests_ok"] = sum(1 for r in frecs if r.get("status") == "ok")
        row["source_pages"] = source.resident_pages()
        time.sleep(0.5)
        peak = max(peak, router.unit_blocks(front.url))
        row["front_blocks_peak"] = peak
        row["cap_blocks"] = cap
        row = finish(row, ctx, ld, router, m0, fault)
        row["index_memory_after_bytes"] = router.index().get("memory_bytes")
        if peak > cap:
            row["violations"].append(f"index held {peak} entries for the capped worker (cap {cap})")
        if (row["source_pages"] or 0) <= cap:
            row["violations"].append(f"the flood stored only {row['source_pages']} pages: not past the cap")
        if not row.get("counters", {}).get("kv_index_cap_exceeded_total"):
            row["violations"].append("kvrouter_kv_index_cap_exceeded_total did not count the overflow")
        return row
    finally:
        _stop(router, mocks)
        front.stop()
        source.stop()


CASES = {
    "killed": case_worker_killed,
    "frozen": case_worker_frozen,
    "restarted": case_worker_restarted,
    "nats": case_nats_restarted,
    "sigterm": case_router_sigterm,
    "slowloris": case_slowloris,
    "uploads": case_stalled_uploads,
    "flood": case_event_flood,
}

# Issue 25 items 4-6 (worker URL spellings, headers, a squatted event port): kvfaults/cases_safe.py.
from . import cases_safe  # noqa: E402

CASES.update(cases_safe.CASES)

# Issue 24: PD fleets with a prefill or a decode worker killed (kvfaults/cases_pd.py).
from . import cases_pd  # noqa: E402

CASES.update(cases_pd.CASES)

# Issue 25 item 1: connection pressure at ulimit -n 256 and 1024 (kvfaults/cases_pressure.py).
from . import cases_pressure  # noqa: E402

CASES.update(cases_pressure.CASES)

# Issue 25 items 2-3 (client-grown state, abort isolation): kvfaults/cases_bounds.py.
from . import cases_bounds  # noqa: E402

CASES.update(cases_bounds.CASES)
