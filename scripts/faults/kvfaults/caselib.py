"""What every fault case shares: the run's size, its context (`Ctx`), the fleet and load it
starts, how a row is finished and checked, and tearing a case down. The cases live in
`cases.py` and `cases_*.py`; none of them imports another."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from kvcompare import httpc, presets, prom

from . import records
from .rig import Load, Mock, Router, poll_until


@dataclass
class Size:
    workers: int
    requests: int          # per loadgen run
    wall_rate: float       # requests per wall second
    speedup: float         # sglang-mock --speedup (and loadgen --sim-speedup)
    hold_s: float          # how long a fault is held (frozen worker, killed worker down)
    slow_conns: int        # slowloris connections
    nofile: int            # router's open-file limit in the slowloris case
    body_timeout_s: int
    upload_mib: int        # each stalled upload's announced body
    uploads: int
    flood_requests: int


# `[faults.quick]` / `[faults.full]` of workloads/presets.toml.
QUICK = Size(**presets.suite("faults", "quick"))
FULL = Size(**presets.suite("faults", "full"))

# (counter, label shown); a counter without that label is shown as one number.
COUNTERS = (("kvrouter_retries_total", "reason"), ("kvrouter_upstream_failures_total", "kind"),
            ("kvrouter_limit_trips_total", "limit"), ("kvrouter_kv_index_cap_exceeded_total", "worker"),
            ("kvrouter_worker_restarts_total", ""), ("kvrouter_kv_event_restarts_total", ""),
            ("kvrouter_kv_event_gaps_total", ""), ("kvrouter_kv_event_replays_total", "result"),
            ("kvrouter_kv_event_recoveries_total", ""), ("kvrouter_kv_event_relayed_total", "result"),
            ("kvrouter_requests_total", "status"))


@dataclass
class Ctx:
    bin_dir: Path
    nats_bin: Path | None
    out: Path
    size: Size

    def b(self, name: str) -> Path:
        return self.bin_dir / name


def counters(before: prom.Series, after: prom.Series) -> dict:
    out = {}
    for name, label in COUNTERS:
        d = prom.delta(before, after, name, label)
        if d:
            out[name.removeprefix("kvrouter_")] = d
    return out


def fleet(ctx: Ctx, name: str, n: int | None = None) -> list[Mock]:
    logs = ctx.out / "logs" / name
    mocks: list[Mock] = []
    try:
        for i in range(n or ctx.size.workers):
            mocks.append(Mock(ctx.b("sglang-mock"), f"mock{i}", logs, ctx.size.speedup))
    except BaseException:
        for m in mocks:
            m.stop()
        raise
    return mocks


def load(ctx: Ctx, router: Router, tag: str, stream: bool = True, max_new_tokens: int | None = None) -> Load:
    s = ctx.size
    ld = Load(ctx.b("loadgen"), router.url, ctx.out, tag, s.requests, s.wall_rate, s.speedup, stream=stream,
              max_new_tokens=max_new_tokens)
    ld.anchor(lambda: prom.total(router.metrics(), "kvrouter_worker_in_flight") > 0)
    return ld


def wait_in_flight(ctx: Ctx, ld: Load, pred, frac: float = 0.3, timeout: float = 10.0) -> None:
    """Waits until the load is `frac` through its schedule, then until `pred()` (e.g. the victim
    has requests running), so the fault hits requests in flight."""
    lead = ld.expected_s(ctx.size.wall_rate) * frac
    while ld.now() < lead:
        time.sleep(0.05)
    poll_until(pred, timeout, interval=0.01)


def finish(row: dict, ctx: Ctx, ld: Load, router: Router | None, m0: prom.Series, fault_s: float | None,
           worker: str | None = None, expect_all: bool = True) -> dict:
    """Client-side counts, router counters and RSS after, and the invariants every case checks."""
    recs = ld.wait()
    at = None if fault_s is None else ld.to_records_time(fault_s, recs)
    s = records.summarize(recs, ctx.size.speedup, at, worker)
    row["client"] = s
    row["violations"] = records.invariant_violations(s, ctx.size.requests if expect_all else None) + row.get(
        "violations", [])
    if router is not None:
        if router.alive():
            row["counters"] = counters(m0, router.metrics())
            row["rss_after_mb"] = router.rss_mb()
            if httpc.request("GET", router.url + "/health", timeout=5)[0] != 200:
                row["violations"].append("router alive but /health not 200 after the case")
        elif row.get("router_must_live", True):
            row["violations"].append(f"router died; log: {router.proc.log_path}")
    return row


def expect(row: dict, *checks: tuple[bool, str]) -> dict:
    """Appends the message of every check `(holds, message)` that does not hold to the row's violations."""
    row["violations"].extend(msg for holds, msg in checks if not holds)
    return row


# ---------------------------------------------------------------------------------------------


def _stop(router: Router | None, mocks: list[Mock]) -> None:
    if router is not None:
        router.stop()
    for m in mocks:
        m.stop()
