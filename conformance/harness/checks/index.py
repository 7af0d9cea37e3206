"""The router's index equals the engine's tree by content after every step (inserts,
a split, a prefix hit, evictions under pressure, a flush, re-insert), with every request
sent through the router in the three body forms (/generate, /v1/completions,
/v1/chat/completions) and, on the SGLang worker, every body validated by SGLang's types."""

from __future__ import annotations

from .. import fleet
from ..fleet import PAGE, prompt
from ..procs import post
from ..result import Step


def run(ctx):
    s = Step("index", ctx.kind)
    env = ctx.env
    a = fleet.Worker(env, ctx.kind, capacity=512)
    b = fleet.Worker(env, ctx.kind, capacity=512)
    router = env.router([a.url, b.url])
    try:
        if not s.check(fleet.wait_sources(router, 2), "router subscribed to both workers"):
            return s.result()
        s.check(fleet.warm(router, a) and fleet.warm(router, b), "subscriptions live")

        def step(what):
            for w in (a, b):
                ok, detail = fleet.wait_index(router, w)
                s.check(ok, f"{what}: index == tree ({w.url})", detail)

        A = prompt(1, 4 * PAGE)
        st, hdr, body = a.generate(A, base=router.url)
        s.check(st == 200, "generate A via router", str(body)[:200])
        holder = hdr.get("x-kvrouter-worker")
        step("insert A (4 pages)")
        st, _, _ = a.generate(A[: 2 * PAGE] + prompt(2, 2 * PAGE), base=router.url)
        step("A' shares 2 pages (split)")
        st, _, _ = a.generate(prompt(3, 3 * PAGE), base=router.url)
        step("insert C")
        st, hdr, body = a.generate(A + prompt(4, PAGE), base=router.url)
        cached = (body or {}).get("meta_info", {}).get("cached_tokens") if isinstance(body, dict) else None
        s.check(hdr.get("x-kvrouter-worker") == holder,
                "A + 1 page routed to A's holder", f"{hdr.get('x-kvrouter-worker')} vs {holder}")
        s.check(cached == 4 * PAGE, "holder reports the prefix cached", f"cached_tokens={cached}")
        step("prefix hit extends A")
        for i in range(10):
            a.generate(prompt(100 + i, 6 * PAGE), base=router.url)
        step("pressure: 10 x 6 pages on 32-page caches (evictions)")
        # other body forms, through the router
        st, _, body = post(f"{router.url}/v1/completions",
                           {"model": "dummy", "prompt": prompt(5, 3 * PAGE), "max_tokens": 1})
        s.check(st == 200, "/v1/completions (token prompt) via router", str(body)[:200])
        st, _, body = post(f"{router.url}/v1/chat/completions",
                           {"model": "dummy", "max_tokens": 1, "stream": False,
                            "messages": [{"role": "user", "content": " ".join(
                                f"t{t}" for t in prompt(6, 3 * PAGE))}]})
        s.check(st == 200, "/v1/chat/completions via router", str(body)[:200])
        st, _, body = post(f"{router.url}/generate",
                           {"text": "hello world " * 20, "rid": "conf-text-1",
                            "sampling_params": {"max_new_tokens": 1, "temperature": 0}})
        s.check(st == 200, "/generate with text + rid via router", str(body)[:200])
        step("other body forms")
        st, _, body = post(f"{router.url}/flush_cache")
        s.check(st == 200, "router /flush_cache fan-out", str(body)[:200])
        step("flush (reset)")
        a.generate(A, base=router.url)
        step("re-insert A after flush")
        if ctx.kind == "sglang":
            for w in (a, b):
                inv = w.state()["invalid"]
                s.check(not inv, f"every body the router sent passed SGLang's validation ({w.url})",
                        str(inv)[:600])
                s.note(f"native hash: {w.state()['native_hash']}")
        else:
            for w in (a, b):
                exp = w.expected()
                res = w.resident_pages()
                ok = all(exp[r]["blocks"] == res.get(r) for r in exp)
                s.check(ok, f"published content == mock's own resident pages ({w.url})",
                        f"events {exp} vs /mock/state {res}")
        return s.result()
    finally:
        router.stop(kill=True)
        a.stop()
        b.stop()
