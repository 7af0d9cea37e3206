"""Load: the router reads ``/v1/loads`` (0.5.23 has no ``/get_load``) for ``/get_loads``,
and consumes the per-rank load publisher advertised in the ``kv_events`` block
(``kvrouter_engine_load_running`` / ``_waiting`` per worker and rank)."""

from __future__ import annotations

from .. import fleet
from ..fleet import PAGE, prompt
from ..procs import get, post, wait_for
from ..result import Step, skipped


def run(ctx):
    s = Step("load", ctx.kind)
    env = ctx.env
    has_pub = ctx.S.SchedulerLoadPublisher is not None
    w = fleet.Worker(env, ctx.kind, load=has_pub)
    router = env.router([w.url])
    try:
        s.check(fleet.wait_sources(router, 1) and fleet.warm(router, w), "router live")
        w.generate(prompt(701, 4 * PAGE))
        st, _, mine = get(f"{w.url}/v1/loads")
        if st != 200:
            s.note(f"worker has no /v1/loads ({st}); router must fall back to /get_load")
        st, _, body = get(f"{router.url}/get_loads")
        loads = (body or {}).get("loads", []) if isinstance(body, dict) else []
        got = [x.get("load") for x in loads if x.get("worker") == w.url]
        want = sum(r.get("num_used_tokens", 0) for r in (mine or {}).get("loads", [])) \
            if isinstance(mine, dict) else None
        s.check(st == 200 and got and got[0] == want,
                "router /get_loads = worker's /v1/loads token load", f"router {got} worker {want}")
        if not has_pub:
            s.note(f"SGLang {ctx.S.version} has no load publisher: router uses its own counts")
            return s.result()
        info = get(f"{w.url}/server_info")[2]
        s.check(bool((info.get("kv_events") or {}).get("load_endpoint_port_base")),
                "worker advertises load_endpoint_port_base")
        if ctx.kind == "sglang":
            post(f"{w.url}/_conformance/load", {"rank": 0, "load": {"running": 64, "waiting": 32}})
            want_r, want_w = 64, 32
        else:
            want_r, want_w = 0, 0  # an idle mock reports its real (empty) queues
        ok, _ = wait_for(lambda: fleet.metric(router, "kvrouter_engine_load_running",
                                              worker=w.url) == want_r and
                         fleet.metric(router, "kvrouter_engine_load_waiting",
                                      worker=w.url) == want_w, timeout=8.0)
        s.check(ok, f"router metrics show the published load (running {want_r}, waiting {want_w})",
                f"running={fleet.metric(router, 'kvrouter_engine_load_running', worker=w.url)} "
                f"waiting={fleet.metric(router, 'kvrouter_engine_load_waiting', worker=w.url)}")
        rep = fleet.metric(router, "kvrouter_engine_load_reports_total")
        s.note(f"kvrouter_engine_load_reports_total={rep}")
        return s.result()
    finally:
        router.stop(kill=True)
        w.stop()
