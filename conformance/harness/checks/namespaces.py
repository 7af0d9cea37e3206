"""Namespaced blocks (``cache_salt``, LoRA adapter): the event side (the router's index
equals the tree, whose pages are keyed per namespace, including one worker holding the
same tokens under two namespaces with one copy evicted) and the request side (a request
routes to the holder of its own namespace, checked against the worker's real
``cached_tokens``). A router without request-side namespaces is reported MISSING."""

from __future__ import annotations

from .. import fleet
from ..fleet import PAGE, prompt
from ..result import Step, skipped


def _cached(body):
    return (body or {}).get("meta_info", {}).get("cached_tokens") if isinstance(body, dict) else None


def run(ctx):
    if "namespaces" in ctx.S.missing:
        return skipped("namespaces", ctx.kind,
                       f"SGLang {ctx.S.version} publishes no namespace ({ctx.S.missing['namespaces']}; "
                       "BlockStored has no cache_salt/lora_name and the same tokens hash alike in "
                       "every extra_key), so no router can index namespaces from its events")
    s = Step("namespaces", ctx.kind)
    env = ctx.env
    # a mock that knows SGLang's --lora-paths gets the adapter registered, as a real server
    # must be launched (--enable-lora + --lora-paths) to accept lora_path
    extra = (["--lora-paths", "adapterA=/adapters/a"]
             if ctx.kind == "mock" and env.mock_supports("--lora-paths") else [])
    a = fleet.Worker(env, ctx.kind, capacity=1024, mock_extra=extra)
    b = fleet.Worker(env, ctx.kind, capacity=1024, mock_extra=extra)
    router = env.router([a.url, b.url])
    try:
        s.check(fleet.wait_sources(router, 2) and fleet.warm(router, a) and fleet.warm(router, b),
                "router live on both")

        def equal(what):
            for w in (a, b):
                ok, detail = fleet.wait_index(router, w)
                s.check(ok, f"{what}: index == tree ({w.url})", detail)

        T1, T2, T3 = prompt(501, 8 * PAGE), prompt(502, 8 * PAGE), prompt(503, 8 * PAGE)
        st, _, body = a.generate(T1, cache_salt="tenant-1")
        s.check(st == 200, "worker accepts cache_salt", str(body)[:200])
        b.generate(T1)
        st, _, body = a.generate(T2, lora_path="adapterA")
        s.check(st == 200, "worker accepts lora_path", str(body)[:200])
        b.generate(T2)
        equal("T1 salted on a, unsalted on b; T2 adapter on a, base on b")
        cases = [("T1 cache_salt tenant-1", T1, {"cache_salt": "tenant-1"}, a),
                 ("T1 unsalted", T1, {}, b),
                 ("T2 lora_path adapterA", T2, {"lora_path": "adapterA"}, a),
                 ("T2 base model", T2, {}, b)]
        wrong = []
        for what, toks, extra, holder in cases:
            st, hdr, body = a.generate(toks + prompt(530, PAGE), base=router.url, **extra)
            to = hdr.get("x-kvrouter-worker")
            c = _cached(body)
            ok = to == holder.url and (c or 0) >= 8 * PAGE
            if not ok:
                why = ""
                if to != holder.url and (c or 0) > 0:
                    why = " (that worker reported it cached although it holds it only under " \
                          "another namespace: the worker ignores the request's namespace)"
                wrong.append(f"{what}: routed to {to}, cached_tokens {c}, holder {holder.url}{why}")
        # one worker, same tokens, two namespaces; then pressure evicts the older copy
        a.generate(T3, cache_salt="tenant-1")
        a.generate(T3)
        equal("T3 twice on a (salted + unsalted)")
        for i in range(7):
            a.generate(prompt(520 + i, 8 * PAGE))
            a.generate(T3)  # keep the unsalted copy recent
        equal("pressure on a evicts the salted T3 copy, unsalted T3 stays")

        st, hdr, body = a.generate(T3 + prompt(531, PAGE), base=router.url)
        if hdr.get("x-kvrouter-worker") != a.url or (_cached(body) or 0) < 8 * PAGE:
            wrong.append(f"T3 unsalted (copy left after the eviction): routed to "
                         f"{hdr.get('x-kvrouter-worker')}, cached_tokens {_cached(body)}, holder {a.url}")
        if wrong:
            s.missing("requests route to the holder of their namespace",
                      "the router does not route by the request's namespace: "
                      + "; ".join(wrong))
        else:
            s.check(True, "requests route to the holder of their namespace")
        return s.result()
    finally:
        router.stop(kill=True)
        a.stop()
        b.stop()
