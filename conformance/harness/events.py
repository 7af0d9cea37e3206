"""A KV-event subscriber on the harness side: SUB + replay DEALER on a worker's publisher,
generic msgpack decoding of both event shapes (0.5.23 tagged maps, 0.5.9-era positional
arrays), and the content those events describe (the router's keys, content.py).

Used for the mock (whose tree the harness cannot read: the index check compares the router
with what the mock published and with the mock's own resident count) and by the
differential test (the normalised event streams of two publishers)."""

from __future__ import annotations

import threading
import time

import msgspec
import zmq

from . import content

POSITIONAL_FIELDS = {
    "BlockStored": ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                    "medium", "cache_salt", "session_id", "lora_name"],
    "BlockRemoved": ["block_hashes", "medium"],
    "AllBlocksCleared": [],
}


def normalise(ev):
    """One event as a dict with ``type``; positional arrays get SGLang's field names."""
    if isinstance(ev, dict):
        return dict(ev)
    tag, rest = ev[0], list(ev[1:])
    out = {"type": tag}
    for name, v in zip(POSITIONAL_FIELDS.get(tag, []), rest):
        out[name] = v
    return out


def decode_batch(payload):
    ts, events, rank = (msgspec.msgpack.decode(payload) + [None])[:3]
    return ts, [normalise(e) for e in events], rank


class Tracker:
    """Applies one rank's events to a content model (engine hash -> router seq hash)."""

    def __init__(self, page_size):
        self.page_size = page_size
        self.by_engine = {}  # engine hash -> router seq hash
        self.seqs = {}  # router seq hash -> count of engine hashes mapping to it
        self.last_seq = None
        self.batches = []  # (seq, ts, events)
        self.host = set()  # engine hashes with a host-tier (CPU_PINNED) copy

    def apply(self, ev):
        t = ev["type"]
        if t == "AllBlocksCleared":
            self.by_engine.clear()
            self.seqs.clear()
            self.host.clear()
        elif t == "BlockStored":
            if (ev.get("medium") or "GPU") == "CPU_PINNED":
                self.host.update(ev["block_hashes"])
            if (ev.get("medium") or "GPU") != "GPU":
                return
            parent = ev.get("parent_block_hash")
            if parent is None:
                prev = content.namespace_key(cache_salt=ev.get("cache_salt"),
                                             lora=ev.get("lora_name"))
            else:
                prev = self.by_engine.get(parent)
                if prev is None:
                    return  # unknown parent: the router drops it too
            toks = ev["token_ids"]
            ps = ev.get("block_size") or self.page_size
            seqs = content.seq_hashes(toks, ps, prev)
            for h, s in zip(ev["block_hashes"], seqs):
                if h in self.by_engine:
                    continue
                self.by_engine[h] = s
                self.seqs[s] = self.seqs.get(s, 0) + 1
        elif t == "BlockRemoved":
            if (ev.get("medium") or "GPU") == "CPU_PINNED":
                self.host.difference_update(ev["block_hashes"])
            if (ev.get("medium") or "GPU") != "GPU":
                return
            for h in ev["block_hashes"]:
                s = self.by_engine.pop(h, None)
                if s is not None:
                    self.seqs[s] -= 1
                    if self.seqs[s] == 0:
                        del self.seqs[s]

    def view(self):
        return {"blocks": len(self.seqs), "digest": f"{content.digest(self.seqs):016x}"}

    def holds(self, seqs):
        """How many of the router-keyed ``seqs`` are resident on the GPU."""
        return sum(1 for q in seqs if q in self.seqs)


class Subscriber:
    """SUB on ``endpoint`` (+ replay from 0 on ``replay``), applying batches in order."""

    def __init__(self, endpoint, replay=None, topic=b"", page_size=16):
        self.ctx = zmq.Context.instance()
        self.tracker = Tracker(page_size)
        self.endpoint, self.replay, self.topic = endpoint, replay, topic
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, topic)
        self.sub.connect(endpoint)
        self.frames = []  # raw multipart of live messages
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _apply(self, seq, payload):
        with self.lock:
            if self.tracker.last_seq is not None and seq <= self.tracker.last_seq:
                return
            ts, events, _ = decode_batch(payload)
            self.tracker.batches.append((seq, ts, events))
            for ev in events:
                self.tracker.apply(ev)
            self.tracker.last_seq = seq

    def replay_from(self, start):
        d = self.ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        d.connect(self.replay)
        d.send_multipart([b"", start.to_bytes(8, "big")])
        out = []
        poller = zmq.Poller()
        poller.register(d, zmq.POLLIN)
        while True:
            if not poller.poll(5000):
                break
            fr = d.recv_multipart()
            seq = int.from_bytes(fr[-2], "big", signed=True)
            if seq == -1:
                break
            out.append((seq, fr[-1], len(fr)))
        d.close()
        return out

    def _run(self):
        poller = zmq.Poller()
        poller.register(self.sub, zmq.POLLIN)
        first = True
        while not self.stop.is_set():
            if not poller.poll(100):
                continue
            fr = self.sub.recv_multipart()
            self.frames.append(fr)
            seq = int.from_bytes(fr[-2], "big", signed=True)
            if first and self.replay and seq > 0:
                for s, payload, _ in self.replay_from(0):
                    if s < seq:
                        self._apply(s, payload)
            first = False
            self._apply(seq, fr[-1])

    def view(self):
        with self.lock:
            return self.tracker.view()

    def host_pages(self):
        """Pages with a host-tier (CPU_PINNED) copy, as the events published them."""
        with self.lock:
            return len(self.tracker.host)

    def gpu_holds(self, seqs):
        with self.lock:
            return self.tracker.holds(seqs)

    def close(self):
        self.stop.set()
        self.thread.join(2)
        self.sub.close(0)


def stream_signature(batches):
    """A publisher's batches without timestamps: [(seq, [normalised events])]."""
    return [(seq, [dict(sorted(e.items())) for e in events]) for seq, _ts, events in batches]


def wait_live(sub: Subscriber, poke, timeout=10.0):
    """Makes the SUB live (slow joiner): ``poke()`` publishes something until a batch arrives."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sub.frames:
            return True
        poke()
        time.sleep(0.1)
    return False
