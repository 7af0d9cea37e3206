"""PD fault cases (issue 24): a 2P2D fleet of `sglang-mock --disaggregation-mode prefill|decode`
behind `router --pd-disaggregation`, one prefill or one decode worker SIGKILLed mid-run and
restarted on its ports. Beyond every case's invariants: only requests in flight at the kill fail,
and no request waits for a KV transfer that will never come (SGLang's bootstrap and waiting
timeouts are 300 s; a survivor leg must be cancelled, not left to time out)."""

from __future__ import annotations

import time

from .caselib import Ctx, _stop, expect, finish, load, wait_in_flight
from .rig import FAST_HEALTH, Mock, Router, poll_until
from kvcompare.procs import free_port

# A request of the quick load takes well under a second of wall time; one that waited for a
# transfer that never comes would take the mocks' bootstrap timeout (300 s of wall time here,
# so a waiting survivor shows as a long request, not as a shortened timeout).
LONGEST_OK_S = 30.0
WAIT_WALL_S = 300.0


def _timeouts(speedup: float) -> list[str]:
    """The mocks' bootstrap and waiting timeouts at WAIT_WALL_S of wall time (the mock runs
    them on its simulated clock, divided by --speedup)."""
    secs = f"{WAIT_WALL_S * speedup:g}" if speedup > 0 else f"{WAIT_WALL_S:g}"
    return ["--disaggregation-bootstrap-timeout", secs, "--disaggregation-waiting-timeout", secs]
# A slow simulated KV link (GB/s; the mock's default is 25) so that each request holds its
# prefill for a while (~0.4 s of wall time at the quick size): a killed prefill has requests
# in flight, as it would under real load.
SLOW_LINK = ["--disaggregation-link-gbps", "0.05"]


def _pd_fleet(ctx: Ctx, name: str, prefill: int = 2, decode: int = 2) -> tuple[list[Mock], list[Mock], list[str]]:
    logs = ctx.out / "logs" / name
    pre: list[Mock] = []
    dec: list[Mock] = []
    try:
        for i in range(prefill):
            port = free_port()
            pre.append(Mock(ctx.b("sglang-mock"), f"prefill{i}", logs, ctx.size.speedup,
                            extra=["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(port),
                                   *SLOW_LINK, *_timeouts(ctx.size.speedup)]))
            pre[-1].bootstrap_port = port
        for i in range(decode):
            dec.append(Mock(ctx.b("sglang-mock"), f"decode{i}", logs, ctx.size.speedup,
                            extra=["--disaggregation-mode", "decode", *SLOW_LINK,
                                   *_timeouts(ctx.size.speedup)]))
    except BaseException:
        for m in pre + dec:
            m.stop()
        raise
    args = ["--pd-disaggregation"]
    for m in pre:
        args += ["--prefill", m.url, str(m.bootstrap_port)]
    for m in dec:
        args += ["--decode", m.url]
    return pre, dec, args


def _pd_killed(ctx: Ctx, role: str) -> dict:
    row = {"case": f"PD {role} worker killed", "fault": f"SIGKILL one {role} mock of 2P2D (0.05 GB/s KV link) while it serves; "
                                                         "restart it on its ports"}
    pre, dec, args = _pd_fleet(ctx, f"pd-{role}")
    mocks = pre + dec
    router = None
    try:
        victim = (pre if role == "prefill" else dec)[0]
        router = Router(ctx.b("router"), [m.url for m in mocks], ctx.out / "logs" / f"pd-{role}" / "router.log",
                        FAST_HEALTH, workers=args)
        row["rss_before_mb"] = router.rss_mb()
        m0 = router.metrics()
        ld = load(ctx, router, f"pd-{role}")
        wait_in_flight(ctx, ld, lambda: victim.running() > 0 or _in_flight(router, victim.url) > 0)
        victim.kill()
        fault = ld.now()
        row["unhealthy_after_s"] = poll_until(lambda: router.worker_healthy(victim.url) is False, 20)
        time.sleep(max(0.0, ctx.size.hold_s - (ld.now() - fault)))
        victim.start()
        row = finish(row, ctx, ld, router, m0, fault)
        recs_longest = row["client"].get("longest_s")
        c = row["client"]
        return expect(
            row,
            (c["failed"] <= c.get("in_flight_at_fault", 0),
             f"{c['failed']} requests failed, more than the {c.get('in_flight_at_fault', 0)} in flight at the kill"),
            (recs_longest is None or recs_longest < LONGEST_OK_S,
             f"a request took {recs_longest} s of wall time: a leg waited for a peer that never came"))
    finally:
        _stop(router, mocks)


def _in_flight(router: Router, url: str) -> float:
    """The router's requests in flight on the worker at `url` (either leg)."""
    return sum(v for (name, labels), v in router.metrics().items()
               if name == "kvrouter_worker_in_flight" and dict(labels).get("worker", "").rstrip("/") == url)


def case_pd_prefill_killed(ctx: Ctx) -> dict:
    return _pd_killed(ctx, "prefill")


def case_pd_decode_killed(ctx: Ctx) -> dict:
    return _pd_killed(ctx, "decode")


CASES = {
    "pd-prefill": case_pd_prefill_killed,
    "pd-decode": case_pd_decode_killed,
}
