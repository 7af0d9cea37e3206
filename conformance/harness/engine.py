"""One DP rank of the fake worker: SGLang's own prefix tree, KV event recorder and
publishers, driven the way the scheduler drives them.

Per request (``managers/scheduler.py`` + ``mem_cache/common.py``): ``match_prefix`` on the
request's ``RadixKey`` (tokens, ``extra_key``, ``cache_salt``), ``inc_lock_ref`` on the
matched node, ``evict`` when the free slots do not cover the new tokens, allocate, then at
finish ``release_kv_cache``'s ``checkpoint``: ``insert`` of ``origin_input_ids +
output_ids[:-1]`` (the last output token has no KV yet) plus the prompt-boundary re-insert,
``dec_lock_ref``; then ``SchedulerKvEventsPublisher.publish_kv_events`` (one batch per
step, ``tree_cache.take_events()``). Flush = ``reset()`` (``AllBlocksCleared``).
The tree is ``RadixCache.create_simulated`` (what SGLang offers for running its tree
without memory pools); its values are slot indices from a counting allocator.
"""

from __future__ import annotations

import threading
import time
from array import array

from . import content


class CountingAllocator:
    """The token-to-KV pool as the tree sees it: a capacity and a free count."""

    device = "cpu"

    def __init__(self, capacity):
        self.capacity = capacity
        self.used = 0
        self._next = 0

    def alloc(self, n):
        self.used += n
        start = self._next
        self._next += n
        return list(range(start, start + n))

    def free_segment(self, value, start_pos=0):
        self.used -= len(value)

    def free(self, value):
        self.used -= len(value)

    def available_size(self):
        return self.capacity - self.used


def _rank_context(S, dp_size, rank):
    """This rank's place in the parallel layout, stated through SGLang's own
    ``runtime_context.get_parallel().override`` (a scheduler process publishes it when it
    builds its process groups; a fake worker has none). Pure DP: one KV publisher per rank."""
    import contextlib

    if S.get_parallel is None:
        return contextlib.nullcontext()
    return S.get_parallel().override(
        pp_rank=0, attn_tp_rank=0, attn_cp_rank=0, attn_dp_size=1, attn_dp_rank=0,
        dp_rank=rank, dp_size=dp_size, num_dp_ranks=dp_size)


class RankEngine:
    def __init__(self, S, *, rank, dp_size, page_size, capacity, kv_events_config,
                 load_publish_endpoint=None, max_running=256):
        self.S = S
        self.rank = rank
        self.page_size = page_size
        self.lock = threading.Lock()
        self.alloc = CountingAllocator(capacity)
        self.max_running = max_running
        self.load = {"running": 0, "waiting": 0}
        self.batches = 0
        self.tree = S.RadixCache.create_simulated(
            mock_allocator=self.alloc, page_size=page_size,
            enable_kv_cache_events=bool(kv_events_config))
        self.kv_pub = None
        self._publisher = None
        if kv_events_config:
            if S.SchedulerKvEventsPublisher is not None:
                with _rank_context(S, dp_size, rank):
                    self.kv_pub = S.SchedulerKvEventsPublisher(
                        kv_events_config=kv_events_config, tree_cache=self.tree,
                        send_metrics_from_scheduler=None, max_running_requests=max_running,
                        max_total_num_tokens=capacity, get_stats=lambda: None)
                self._publisher = self.kv_pub.kv_event_publisher
            else:  # older SGLang: the scheduler calls the factory itself
                self._publisher = S.EventPublisherFactory.create(kv_events_config, rank)
        self.load_pub = None
        if S.SchedulerLoadPublisher is not None and load_publish_endpoint:
            with _rank_context(S, dp_size, rank):
                self.load_pub = S.SchedulerLoadPublisher(
                    kv_events_config=kv_events_config,
                    load_publish_endpoint=load_publish_endpoint)
        # Scheduler start: the tree's reset() at init recorded AllBlocksCleared (seq 0).
        self.publish()

    # -- the scheduler's steps ------------------------------------------------------------

    def publish(self):
        if self.kv_pub is not None:
            self.kv_pub.publish_kv_events()
            self.batches += 1
        elif getattr(self, "_publisher", None) is not None:
            events = self.tree.take_events()
            if events:
                self._publisher.publish(self.S.KVEventBatch(ts=time.time(), events=events))
                self.batches += 1

    def key(self, tokens, extra_key=None, cache_salt=None):
        if self.S.radix_key_has_salt:  # 0.5.23: array("q") tokens, cache_salt namespace
            return self.S.RadixKey(array("q", tokens), extra_key, cache_salt=cache_salt)
        return self.S.RadixKey(list(tokens), extra_key)  # older: a list, no salt

    def run_request(self, tokens, output_ids, extra_key=None, cache_salt=None):
        """One request from admission to finish; returns cached_tokens."""
        S = self.S
        with self.lock:
            key = self.key(tokens, extra_key, cache_salt)
            m = self.tree.match_prefix(S.MatchPrefixParams(key=key))
            cached = (m.device_prefix_len if hasattr(m, "device_prefix_len")
                      else len(m.device_indices))  # older MatchResult: the indices
            node = m.last_device_node
            self.tree.inc_lock_ref(node)
            full = list(tokens) + list(output_ids[:-1])
            need = len(full) - cached
            if need > self.alloc.available_size():
                self.tree.evict(S.EvictParams(num_tokens=need - self.alloc.available_size()))
            slots = self.alloc.alloc(need)
            self.publish()  # prefill step (evictions)
            ps = self.page_size
            fkey = self.key(full[: len(full) // ps * ps], extra_key, cache_salt)
            value = S.torch.tensor(list(range(len(fkey))))
            res = self.tree.insert(S.InsertParams(key=fkey, value=value))
            # the tree took one ref for new pages; the rest (dups and the partial page)
            # go back to the pool, as _insert_cache / free_kv_row do
            new_pages = len(fkey) - res.prefix_len
            self.alloc.used -= len(slots) - max(0, new_pages)
            prompt_key = self.key(tokens[: len(tokens) // ps * ps], extra_key, cache_salt)
            if 0 < len(prompt_key) < len(fkey):
                self.tree.insert(S.InsertParams(key=prompt_key, value=value[:len(prompt_key)]))
            self.tree.dec_lock_ref(node)
            self.publish()  # finish step (stores)
            return cached

    def evict(self, num_tokens):
        with self.lock:
            self.tree.evict(self.S.EvictParams(num_tokens=num_tokens))
            self.publish()

    def flush(self):
        with self.lock:
            self.tree.reset()
            self.alloc.used = 0
            self.publish()

    def host_writeback(self, evict_gpu):
        """HiCache write-through to host (``medium`` CPU_PINNED), then optionally evict the
        device copy, as ``HiRadixCache`` publishes them (store CPU, remove GPU)."""
        S = self.S
        with self.lock:
            rec = self.tree.kv_events
            pages = 0
            for n in self._nodes():
                rec.record_store(n, medium=S.StorageMedium.CPU)
                pages += len(n.key) // self.page_size
            if evict_gpu:
                self.tree.evict(S.EvictParams(num_tokens=10**9))
            self.publish()
            return pages

    # -- views ----------------------------------------------------------------------------

    def _nodes(self):
        stack = list(self.tree.root_node.children.values())
        out = []
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(n.children.values())
        # parents before children
        out.sort(key=lambda n: self._depth(n))
        return out

    def _depth(self, n):
        d = 0
        while n.parent is not None:
            d += 1
            n = n.parent
        return d

    def content(self):
        """The tree's pages as the router keys them (see content.py)."""
        with self.lock:
            unit = content.Unit()
            rec = getattr(self.tree, "kv_events", None)
            names = rec.lora_names if rec is not None else None

            def walk(node, parent_seq):
                for child in node.children.values():
                    k = child.key
                    toks = list(k.token_ids[: len(k)])
                    if parent_seq is None:
                        lora = names.resolve(k.extra_key) if (names and k.extra_key) else None
                        salt = getattr(k, "cache_salt", None)
                        parent = content.namespace_key(cache_salt=salt, lora=lora)
                    else:
                        parent = parent_seq
                    seqs = content.seq_hashes(toks, self.page_size, parent)
                    unit.seqs.update(seqs)
                    walk(child, seqs[-1] if seqs else parent_seq)

            walk(self.tree.root_node, None)
            v = unit.view()
            v["tokens"] = self.tree.total_size() if hasattr(self.tree, "total_size") else None
            return v

    def load_snapshot(self):
        S = self.S
        ls = S.load_snapshot_mod
        used = self.alloc.used
        return ls.LoadSnapshot(
            timestamp=time.time(), dp_rank=self.rank,
            max_total_num_tokens=self.alloc.capacity, max_running_requests=self.max_running,
            num_running_reqs=self.load["running"], num_waiting_reqs=self.load["waiting"],
            num_used_tokens=used, num_total_tokens=used,
            memory=ls.MemoryMetrics(weight_gb=0.0, kv_cache_gb=0.0, graph_gb=0.0,
                                    token_capacity=self.alloc.capacity),
            disaggregation=ls.DisaggregationMetrics(mode="null"),
            queues=ls.QueueMetrics(waiting=self.load["waiting"], grammar=0, paused=0,
                                   retracted=0, prealloc_ready=0),
        )

    def publish_load(self):
        """The idle loop's forced ``publish_load_stat`` (dedup + 1 s heartbeat are SGLang's)."""
        if self.load_pub is not None:
            self.load_pub.publish_load_stat(self.load_snapshot, force=True)

    def shutdown(self):
        pub = getattr(self, "_publisher", None)
        if pub is not None:
            pub.shutdown()
        if self.load_pub is not None:
            self.load_pub.close()
