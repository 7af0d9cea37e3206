"""Workers of either kind (SGLang's objects or sglang-mock) behind one interface, and the
router's views the checks read (``/debug/index``, ``/metrics``, ``/workers``)."""

from __future__ import annotations

import json
import time

from . import events
from .procs import free_port_range, get, post, wait_for

PAGE = 16


def prompt(seed, n_tokens):
    return [1 + (seed * 7919 + i * 31) % 30000 for i in range(n_tokens)]


def kv_config(endpoint, replay=None, **extra):
    cfg = {"publisher": "zmq", "endpoint": endpoint, "topic": ""}
    if replay:
        cfg["replay_endpoint"] = replay
    cfg.update(extra)
    return json.dumps(cfg)


class Worker:
    """One worker process and how to read what it holds."""

    def __init__(self, env, kind, *, form="star", dp_size=1, capacity=65536, load=False,
                 port=None, kv_ports=None, mock_extra=(), sglang_extra=None):
        self.mock_extra = list(mock_extra)
        self.sglang_extra = dict(sglang_extra or {})  # e.g. disaggregation_mode
        self.env, self.kind, self.form, self.dp = env, kind, form, dp_size
        self.capacity, self.load = capacity, load
        self.port = port or free_port_range(1)
        # KV, replay (and load) ranges, each dp_size wide
        self.kv_base = kv_ports or free_port_range(3 * dp_size + 1)
        self.rp_base = self.kv_base + dp_size
        self.ipc_path = f"/tmp/kvr-conf-{self.kv_base}"
        self.subs = []
        self.proc = None
        self.start()

    # -- lifecycle ------------------------------------------------------------------------

    def kv_events_config(self):
        k, r = self.kv_base, self.rp_base
        f = self.form
        if f == "star":
            return kv_config(f"tcp://*:{k}", f"tcp://*:{r}")
        if f == "any":
            return kv_config(f"tcp://0.0.0.0:{k}", f"tcp://0.0.0.0:{r}")
        if f == "bind":
            return kv_config(f"tcp://127.0.0.1:{k}", f"tcp://127.0.0.1:{r}", bind=True)
        if f == "ipc":
            return kv_config(f"ipc://{self.ipc_path}", f"ipc://{self.ipc_path}-replay")
        if f == "none":
            return None
        raise ValueError(f)

    def start(self):
        kw = dict(port=self.port, page_size=PAGE, dp_size=self.dp,
                  kv_events_config=self.kv_events_config(), capacity=self.capacity,
                  load_publish_endpoint="auto" if self.load else None)
        if self.kind == "sglang":
            self.proc = self.env.sglang_worker(**kw, **self.sglang_extra)
        else:
            self.proc = self.env.mock_worker(extra=self.env.mock_flags + self.mock_extra, **kw)
        self.url = self.proc.url
        self.subs = []
        if self.kind == "mock" and self.form != "none":
            for r in range(self.dp):
                ep, rp = self.dial(r)
                self.subs.append(events.Subscriber(ep, rp, page_size=PAGE))

    def dial(self, rank):
        if self.form == "ipc":
            sfx = f"_dp{rank}" if self.dp > 1 else ""
            return f"ipc://{self.ipc_path}{sfx}", f"ipc://{self.ipc_path}-replay{sfx}"
        return (f"tcp://127.0.0.1:{self.kv_base + rank}",
                f"tcp://127.0.0.1:{self.rp_base + rank}")

    def stop(self):
        for s in self.subs:
            s.close()
        self.subs = []
        if self.proc is not None:
            self.proc.stop(kill=True)
            if self.proc in self.env.procs:
                self.env.procs.remove(self.proc)
            self.proc = None

    def restart(self):
        self.stop()
        self.start()

    # -- operations -----------------------------------------------------------------------

    def generate(self, tokens, max_new=1, base=None, **extra):
        body = {"input_ids": tokens, "sampling_params": {"max_new_tokens": max_new}}
        body.update(extra)
        return post(f"{base or self.url}/generate", body)

    def flush(self):
        return post(f"{self.url}/flush_cache")

    # -- views ----------------------------------------------------------------------------

    def expected(self):
        """Per rank: {blocks, digest} of what the worker holds, in the router's keys."""
        if self.kind == "sglang":
            _, _, st = get(f"{self.url}/_conformance/state")
            return {r["rank"]: {"blocks": r["blocks"], "digest": r["digest"]}
                    for r in st["ranks"]}
        return {r: s.view() for r, s in enumerate(self.subs)}

    def state(self):
        if self.kind == "sglang":
            return get(f"{self.url}/_conformance/state")[2]
        return get(f"{self.url}/mock/state")[2]

    def resident_pages(self):
        """The worker's own resident count (mock: /mock/state), for the tracker cross-check."""
        if self.kind == "sglang":
            return {r["rank"]: r["tokens"] // PAGE for r in self.state()["ranks"]}
        st = self.state()
        ranks = st.get("ranks", st) if isinstance(st, dict) else st
        out = {}
        for i, r in enumerate(ranks if isinstance(ranks, list) else []):
            out[i] = int(r.get("cached_tokens_resident", 0)) // PAGE
        return out


# ---- router views ---------------------------------------------------------------------------

def index(router):
    return get(f"{router.url}/debug/index")[2]


def units(router):
    v = index(router)
    return {(u["worker"], u["rank"]): {"blocks": u["blocks"], "digest": u["digest"]}
            for u in v.get("units", [])}


def metrics(router):
    _, _, text = get(f"{router.url}/metrics")
    out = {}
    for line in (text or "").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        try:
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
        except ValueError:
            continue
    return out


def metric(router, name, **labels):
    total = None
    for k, v in metrics(router).items():
        if not (k == name or k.startswith(name + "{")):
            continue
        if all(f'{lk}="{lv}"' in k for lk, lv in labels.items()):
            total = (total or 0) + v
    return total


def index_matches(router, worker):
    """Whether every rank of ``worker`` in the router's index equals the worker's content;
    returns (ok, detail)."""
    exp = worker.expected()
    got = units(router)
    mism = []
    for r, e in exp.items():
        g = got.get((worker.url, r))
        if g != e:
            mism.append(f"rank {r}: router {g} engine {e}")
    return (not mism), ("; ".join(mism) or f"equal {exp}")


def wait_index(router, worker, timeout=8.0):
    ok, detail = wait_for(lambda: index_matches(router, worker)[0], timeout=timeout)
    return ok, index_matches(router, worker)[1]


def wait_sources(router, n, timeout=15.0):
    ok, last = wait_for(lambda: (index(router) or {}).get("zmq_sources") == n, timeout=timeout)
    return ok


def warm(router, worker, seed=90_000, timeout=15.0, rank=None):
    """Makes the router's subscription live (ZMQ slow joiner): small distinct prompts sent
    straight to the worker until the router's index shows blocks on every rank."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seed += 1
        ranks = range(worker.dp) if rank is None else [rank]
        for r in ranks:
            extra = {"routed_dp_rank": r} if worker.dp > 1 else {}
            worker.generate(prompt(seed, PAGE * 2), **extra)
        got = units(router)
        if all((got.get((worker.url, r)) or {}).get("blocks", 0) > 0 for r in ranks):
            return True
        time.sleep(0.05)
    return False
