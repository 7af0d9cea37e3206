"""Cache tiers (HiCache): a worker writes its pages back to host memory (``BlockStored``
with ``medium`` CPU_PINNED) and evicts the device copies (``BlockRemoved`` GPU). The
router's GPU index must equal the tree's device pages; a router that credits host hits
must show the host copies (``/debug/index`` tier view) and route a request for them to that
worker. A router that skips non-GPU media is reported MISSING (branch `tiers`).

The SGLang worker is driven by the harness route ``/_conformance/writeback`` (HiCache's
write-back of every device page, then device eviction). sglang-mock has no such route; it
is started with ``--enable-hierarchical-cache`` (``write_through``: every new node is backed
up to the host at once, ``BlockStored`` CPU_PINNED) on a 16-page device pool (host 2 x), and
device pressure (distinct prompts sent straight to it) demotes the prefix to host-only
(``BlockRemoved`` GPU, host copy kept), as SGLang's ``evict_device_leaf`` does. The mock's
tree is not readable here, so the GPU index is compared with what it published and the
router's host tier with the host copies its events describe (``events.Tracker``)."""

from __future__ import annotations

from .. import content, fleet
from ..fleet import PAGE, prompt
from ..procs import post, wait_for
from ..result import Step, skipped


# The mock's device pool for this check, in pages (host pool: 2 x, SGLang's default ratio).
MOCK_DEVICE_PAGES = 16


def run(ctx):
    if ctx.S.StorageMedium is None:
        return skipped("tiers", ctx.kind, f"SGLang {ctx.S.version} has no StorageMedium")
    if ctx.kind == "mock":
        return run_mock(ctx)
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


def host_blocks(router, worker):
    view = fleet.index(router)
    return [u.get("host_blocks") for u in (view.get("tiers") or {}).get("units", [])
            if u.get("worker") == worker.url]


def run_mock(ctx):
    s = Step("tiers", ctx.kind)
    env = ctx.env
    flags = ["--enable-hierarchical-cache"]
    cap = MOCK_DEVICE_PAGES * PAGE
    a = fleet.Worker(env, ctx.kind, capacity=cap, mock_extra=flags)
    b = fleet.Worker(env, ctx.kind, capacity=cap, mock_extra=flags)
    # b first: a router that ignores the host tier sees a tie, and ties do not favour a.
    router = env.router([b.url, a.url])
    seed = [700]

    def push_to_host(t_seqs):
        """Distinct 8-page prompts straight to ``a`` until none of T is on its GPU."""
        for _ in range(8):
            if a.subs[0].gpu_holds(t_seqs) == 0:
                return True
            seed[0] += 1
            a.generate(prompt(seed[0], 8 * PAGE))
            wait_for(lambda: fleet.index_matches(router, a)[0], timeout=5.0)
        return a.subs[0].gpu_holds(t_seqs) == 0

    try:
        s.check(fleet.wait_sources(router, 2) and fleet.warm(router, a) and fleet.warm(router, b),
                "router live on both")
        T = prompt(601, 8 * PAGE)
        t_seqs = content.seq_hashes(T, PAGE)
        a.generate(T)
        ok, detail = fleet.wait_index(router, a)
        s.check(ok and a.subs[0].gpu_holds(t_seqs) == 8,
                "T on a's GPU (written through to host): index == published content", detail)
        ign0 = fleet.metric(router, "kvrouter_kv_events_ignored_total", reason="medium") or 0
        s.check(push_to_host(t_seqs), "device pressure demoted T to host-only (BlockRemoved GPU)",
                f"T pages still on a's GPU: {a.subs[0].gpu_holds(t_seqs)}")
        ok, detail = fleet.wait_index(router, a)
        s.check(ok, "GPU index == the mock's device pages after the device eviction", detail)
        ign1 = fleet.metric(router, "kvrouter_kv_events_ignored_total", reason="medium") or 0
        view = fleet.index(router)
        tier_view = {k: v for k, v in view.items() if "tier" in k or "host" in k}
        if ign1 > ign0 and not tier_view:
            s.missing("host-tier blocks credited",
                      f"router skipped {int(ign1 - ign0)} host-tier event(s) "
                      "(kvrouter_kv_events_ignored_total{reason=\"medium\"}); no tier view in "
                      "/debug/index (branch `tiers`)")
        else:
            ok, _ = wait_for(lambda: host_blocks(router, a) == [a.subs[0].host_pages()], timeout=8.0)
            s.check(ok, "router's host tier holds the mock's host copies",
                    f"router host_blocks {host_blocks(router, a)}, "
                    f"mock published {a.subs[0].host_pages()} host pages")
            hits = 0
            for i in range(4):
                st, hdr, _ = a.generate(T + prompt(610 + i, PAGE), base=router.url)
                hits += hdr.get("x-kvrouter-worker") == a.url
                push_to_host(t_seqs)  # the device copy is back; push it to host again
            s.check(hits >= 3, "requests for host-held T route to its holder",
                    f"{hits}/4; {tier_view}")
        return s.result()
    finally:
        router.stop(kill=True)
        a.stop()
        b.stop()
