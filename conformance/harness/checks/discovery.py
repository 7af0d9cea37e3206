"""Discovery for every endpoint form SGLang advertises: ``tcp://*:P``, ``tcp://0.0.0.0:P``,
a concrete host with ``"bind": true``, ``ipc://`` (no ``kv_events`` block: the router's
string fallback) and two DP ranks. Each: the router subscribes to every rank and its index
equals the worker's tree after a request."""

from __future__ import annotations

from .. import fleet
from ..fleet import PAGE, prompt
from ..result import Step

FORMS = [("star", 1), ("any", 1), ("bind", 1), ("ipc", 1), ("star", 2)]


def run(ctx):
    s = Step("discovery", ctx.kind)
    env = ctx.env
    forms = FORMS[:3] + FORMS[4:] if ctx.quick else FORMS
    for form, dp in forms:
        label = f"{form}" + (f" dp{dp}" if dp > 1 else "")
        w = fleet.Worker(env, ctx.kind, form=form, dp_size=dp)
        router = env.router([w.url])
        try:
            from ..procs import get

            info = get(f"{w.url}/server_info")[2]
            block = info.get("kv_events") if isinstance(info, dict) else None
            s.note(f"{label}: kv_events block {'present' if block else 'absent'}")
            if not s.check(fleet.wait_sources(router, dp), f"{label}: router subscribed to {dp} rank(s)",
                           f"zmq_sources={fleet.index(router).get('zmq_sources')}; "
                           f"router log: {' | '.join(router.grep('subscrib')[-2:])}"):
                continue
            s.check(fleet.warm(router, w), f"{label}: events reach the index")
            for r in range(dp):
                extra = {"routed_dp_rank": r} if dp > 1 else {}
                w.generate(prompt(200 + r, 3 * PAGE), **extra)
            ok, detail = fleet.wait_index(router, w)
            s.check(ok, f"{label}: index == tree on every rank", detail)
        finally:
            router.stop(kill=True)
            w.stop()
    return s.result()
