"""Discovery for every endpoint form SGLang advertises: ``tcp://*:P``, ``tcp://0.0.0.0:P``,
a concrete host with ``"bind": true``, ``ipc://`` (no ``kv_events`` block: the router's
string fallback) and two DP ranks. Each: the router subscribes to every rank and its index
equals the worker's tree after a request."""

from __future__ import annotations

import socket

from .. import fleet
from ..fleet import PAGE, prompt
from ..procs import free_port_range
from ..result import Step


def sglang_binds(S, form):
    """Whether this SGLang version's own ZmqEventPublisher binds ``form``'s PUB endpoint
    (0.5.9 binds only ``*``/``::``/ipc; 0.5.23 also ``0.0.0.0`` and ``"bind": true``):
    one is built on spare ports and its port probed."""
    if form in ("ipc", "star"):
        return True
    k = free_port_range(2)
    host = "0.0.0.0" if form == "any" else "127.0.0.1"
    extra = {"bind": True} if form == "bind" else {}
    pub = S.EventPublisherFactory.create(
        fleet.kv_config(f"tcp://{host}:{k}", f"tcp://{host}:{k + 1}", **extra), 0)
    try:
        with socket.socket() as c:
            c.settimeout(1.0)
            return c.connect_ex(("127.0.0.1", k)) == 0
    finally:
        pub.shutdown()

FORMS = [("star", 1), ("any", 1), ("bind", 1), ("ipc", 1), ("star", 2)]


def run(ctx):
    s = Step("discovery", ctx.kind)
    env = ctx.env
    forms = FORMS[:3] + FORMS[4:] if ctx.quick else FORMS
    for form, dp in forms:
        label = f"{form}" + (f" dp{dp}" if dp > 1 else "")
        if not sglang_binds(ctx.S, form):
            s.note(f"{label}: SGLang {ctx.S.version}'s publisher connects out for this form "
                   "(nothing listens), so no router can subscribe: not checked")
            continue
        w = fleet.Worker(env, ctx.kind, form=form, dp_size=dp)
        router = env.router([w.url])
        try:
            from ..procs import get

            info = get(f"{w.url}/server_info")[2]
            block = info.get("kv_events") if isinstance(info, dict) else None
            s.note(f"{label}: kv_events block {'present' if block else 'absent'}")
            if form == "ipc" and not fleet.wait_sources(router, dp, timeout=5.0):
                s.missing(f"{label}: router subscribes to an ipc:// publisher",
                          "the router does not dial ipc:// endpoints (crates/kvrouter/src/workers/"
                          "info.rs KvEventsConfig::dial_endpoint returns None for them) although "
                          "SGLang binds them; router log: " + " | ".join(router.grep("subscrib")[-1:]))
                continue
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
