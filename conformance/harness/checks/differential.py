"""Differential test: the same operation sequences through sglang-mock and through SGLang's
own tree + recorder + ZmqEventPublisher (in this process, engine.py), both read by the
same subscriber (events.py, replay from 0); the decoded event streams are compared with
timestamps and batch boundaries aside (the mock publishes once per scheduler iteration,
the engine once per step), then batch by batch."""

from __future__ import annotations

import time

from .. import fleet
from ..engine import RankEngine
from ..events import Subscriber
from ..fleet import PAGE, kv_config, prompt
from ..procs import free_port_range, post
from ..result import Step

CAPACITY = 16 * PAGE


def sequences():
    A, B, C = prompt(801, 3 * PAGE), prompt(802, 2 * PAGE), prompt(803, 2 * PAGE)
    base = [("gen", A, {}), ("gen", A[: 2 * PAGE] + B, {}), ("gen", C, {}), ("gen", A, {})]
    base += [("gen", prompt(810 + i, 4 * PAGE), {}) for i in range(4)]  # pressure: evictions
    base += [("flush",), ("gen", A, {}), ("gen", A[:PAGE * 2] + [7] * 5, {}),  # partial page
             ("flush",)]
    ns = [("gen", A, {}), ("gen", A, {"cache_salt": "tenant-1"}),
          ("gen", B, {"cache_salt": "tenant-1"}), ("gen", A, {"cache_salt": "tenant-2"}),
          ("flush",)]
    return [("plain", base), ("namespaced", ns)]


def _short(ev):
    e = dict(ev)
    if "token_ids" in e:
        e["token_ids"] = f"[{len(e['token_ids'])} ids]"
    return e


def _wait_clears(sub, n, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with sub.lock:
            k = sum(1 for _, _, evs in sub.tracker.batches for e in evs
                    if e["type"] == "AllBlocksCleared")
        if k >= n:
            return True
        time.sleep(0.05)
    return False


def _flat(sub):
    with sub.lock:
        return [dict(sorted(e.items())) for _, _, evs in sub.tracker.batches for e in evs]


def run(ctx):
    s = Step("differential", "mock vs sglang")
    for name, ops in sequences():
        if name == "namespaced" and "namespaces" in ctx.S.missing:
            s.note(f"namespaced sequence skipped: {ctx.S.missing['namespaces']}")
            continue
        _one(s, ctx, name, ops)
    return s.result()


def _one(s, ctx, name, ops):
    env, S = ctx.env, ctx.S
    n_clears = 1 + sum(1 for op in ops if op[0] == "flush")
    # SGLang's objects, in process
    k = free_port_range(2)
    cfg = kv_config(f"tcp://*:{k}", f"tcp://*:{k + 1}")
    eng = RankEngine(S, rank=0, dp_size=1, page_size=PAGE, capacity=CAPACITY,
                     kv_events_config=cfg)
    real = Subscriber(f"tcp://127.0.0.1:{k}", f"tcp://127.0.0.1:{k + 1}", page_size=PAGE)
    mock = fleet.Worker(env, "mock", capacity=CAPACITY)
    msub = mock.subs[0]
    try:
        time.sleep(0.3)  # both SUBs connect before the first operation's batch (slow joiner)
        for op in ops:
            if op[0] == "flush":
                eng.flush()
                mock.flush()
                continue
            _, toks, extra = op
            st, _, body = mock.generate(toks, max_new=1, **extra)
            if st != 200:
                s.check(False, f"{name}: mock accepted {extra or 'plain'} request", str(body)[:200])
                continue
            out = body.get("output_ids") or [0]
            eng.run_request(toks, out, cache_salt=extra.get("cache_salt"))
        s.check(_wait_clears(real, n_clears), f"{name}: SGLang stream complete")
        s.check(_wait_clears(msub, n_clears), f"{name}: mock stream complete")
        a, b = _flat(real), _flat(msub)
        same = a == b
        detail = ""
        if not same:
            for i, (x, y) in enumerate(zip(a, b)):
                if x != y:
                    detail = f"first difference at event {i}: sglang {_short(x)} | mock {_short(y)}"
                    break
            else:
                detail = f"lengths differ: sglang {len(a)} events, mock {len(b)}"
        s.check(same, f"{name}: event streams equal ({len(a)} events, timestamps aside)", detail)
        with real.lock, msub.lock:
            ra = [len(evs) for _, _, evs in real.tracker.batches]
            rb = [len(evs) for _, _, evs in msub.tracker.batches]
        s.note(f"{name}: batch sizes sglang {ra}, mock {rb}")
    finally:
        real.close()
        eng.shutdown()
        mock.stop()
