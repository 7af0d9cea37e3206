"""Replay after a router restart: a new router joins a worker that already holds blocks
(SGLang is silent while idle, so the router learns of it at the worker's next batch) and
rebuilds the whole tree from the worker's replay ROUTER (sequence 0 onwards)."""

from __future__ import annotations

from .. import fleet
from ..fleet import PAGE, prompt
from ..result import Step


def run(ctx):
    s = Step("replay", ctx.kind)
    env = ctx.env
    w = fleet.Worker(env, ctx.kind)
    router = env.router([w.url])
    try:
        s.check(fleet.wait_sources(router, 1) and fleet.warm(router, w), "first router live")
        for i in range(4):
            w.generate(prompt(300 + i, 4 * PAGE))
        ok, detail = fleet.wait_index(router, w)
        s.check(ok, "first router: index == tree", detail)
        router.stop(kill=True)
        w.generate(prompt(310, 4 * PAGE))  # published while no router listens
        router = env.router([w.url])
        s.check(fleet.wait_sources(router, 1), "second router subscribed")
        # the next batch makes the router replay from 0 (slow joiner: poke until it shows)
        ok = fleet.warm(router, w, seed=91_000)
        s.check(ok, "second router sees the worker's next batch")
        ok, detail = fleet.wait_index(router, w)
        s.check(ok, "second router: index == tree (blocks stored before it started included)",
                detail)
        replays = fleet.metric(router, "kvrouter_kv_event_replays_total")
        s.note(f"kvrouter_kv_event_replays_total={replays}")
        return s.result()
    finally:
        router.stop(kill=True)
        w.stop()
