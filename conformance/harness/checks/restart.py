"""A worker restarted behind its URL (same HTTP and event ports) inside one health
interval: the new incarnation is idle (its seq-0 AllBlocksCleared is usually lost to the
router's reconnect), so the router must notice the restart another way (launch marker in
/server_info) and drop the old blocks within about one health interval."""

from __future__ import annotations

import time

from .. import fleet
from ..fleet import PAGE, prompt
from ..procs import wait_for
from ..result import Step

INTERVAL = 1.0


def run(ctx):
    s = Step("restart", ctx.kind)
    env = ctx.env
    w = fleet.Worker(env, ctx.kind)
    router = env.router([w.url], health_interval=INTERVAL)
    try:
        s.check(fleet.wait_sources(router, 1) and fleet.warm(router, w), "router live")
        for i in range(3):
            w.generate(prompt(400 + i, 4 * PAGE))
        ok, detail = fleet.wait_index(router, w)
        s.check(ok, "before restart: index == tree", detail)
        before = fleet.metric(router, "kvrouter_worker_restarts_total") or 0
        w.restart()
        t_up = time.monotonic()
        ok, _ = wait_for(lambda: fleet.units(router).get((w.url, 0), {}).get("blocks") == 0,
                         timeout=2 * INTERVAL + 3.0, interval=0.02)
        took = time.monotonic() - t_up
        after = fleet.metric(router, "kvrouter_worker_restarts_total") or 0
        s.check(ok, f"stale blocks dropped within 2 x health interval ({INTERVAL:g} s)",
                f"units {fleet.units(router).get((w.url, 0))}")
        if ok:
            s.note(f"cleared {took:.2f} s after the new process answered")
        s.check(after > before, "router counted the restart", f"restarts_total {before} -> {after}")
        ok = fleet.warm(router, w, seed=92_000)
        ok2, detail = fleet.wait_index(router, w)
        s.check(ok and ok2, "new incarnation: index == tree", detail)
        return s.result()
    finally:
        router.stop(kill=True)
        w.stop()
