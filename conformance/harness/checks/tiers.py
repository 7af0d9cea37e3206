"""Cache tiers (HiCache): a worker writes its pages back to host memory (``BlockStored``
with ``medium`` CPU_PINNED) and evicts the device copies (``BlockRemoved`` GPU). The
router's GPU index must equal the tree's device pages; a router that credits host hits
must show the host copies (``/debug/index`` tier view) and route a request for them to that
worker. A router that skips non-GPU media is reported MISSING (branch `tiers`)."""

from __future__ import annotations

from .. import fleet
from ..fleet import PAGE, prompt
from ..procs import post
from ..result import Step, skipped


def run(ctx):
    if ctx.kind != "sglang":
        return skipped("tiers", ctx.kind, "the mock has no HiCache emulation to drive here")
    if ctx.S.StorageMedium is None:
        return skipped("tiers", ctx.kind, f"SGLang {ctx.S.version} has no StorageMedium")
    s = Step("tiers", ctx.kind)
    env = ctx.env
    a = fleet.Worker(env, ctx.kind)
    b = fleet.Worker(env, ctx.kind)
    router = env.router([a.url, b.url])
    try:
        s.check(fleet.wait_sources(router, 2) and fleet.warm(router, a) and fleet.warm(router, b),
                "router live on both")
        T = prompt(601, 8 * PAGE)
        a.generate(T)
        ok, detail = fleet.wait_index(router, a)
        s.check(ok, "T on a's GPU: index == tree", detail)
        ign0 = fleet.metric(router, "kvrouter_kv_events_ignored_total", reason="medium") or 0
        st, _, body = post(f"{a.url}/_conformance/writeback", {"rank": 0, "evict_gpu": True})
        s.check(st == 200, "HiCache write-back + device eviction published", str(body))
        ok, detail = fleet.wait_index(router, a)
        s.check(ok, "GPU index == tree's device pages after the device eviction", detail)
        ign1 = fleet.metric(router, "kvrouter_kv_events_ignored_total", reason="medium") or 0
        view = fleet.index(router)
        tier_view = {k: v for k, v in view.items() if "tier" in k or "host" in k}
        if ign1 > ign0 and not tier_view:
            s.missing("host-tier blocks credited",
                      f"router skipped {int(ign1 - ign0)} host-tier event(s) "
                      "(kvrouter_kv_events_ignored_total{reason=\"medium\"}); no tier view in "
                      "/debug/index (branch `tiers`)")
        else:
            pages = (body or {}).get("pages")
            host = [u.get("host_blocks") for u in (view.get("tiers") or {}).get("units", [])
                    if u.get("worker") == a.url]
            s.check(host == [pages], "router's host tier holds the written-back pages",
                    f"router host_blocks {host}, engine wrote back {pages} pages")
            hits = 0
            for i in range(4):
                st, hdr, _ = a.generate(T + prompt(610 + i, PAGE), base=router.url)
                hits += hdr.get("x-kvrouter-worker") == a.url
                a.generate(T)  # the device copy is back; push it to host again
                post(f"{a.url}/_conformance/writeback", {"rank": 0, "evict_gpu": True})
            s.check(hits >= 3, "requests for host-held T route to its holder", f"{hits}/4; {tier_view}")
        return s.result()
    finally:
        router.stop(kill=True)
        a.stop()
        b.stop()
