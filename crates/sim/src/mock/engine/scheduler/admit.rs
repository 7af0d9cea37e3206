//! Prefill admission (SGLang `Scheduler.get_new_batch_prefill` with `PrefillAdder`,
//! `managers/schedule_policy.py`): a continuing chunked request first, then the waiting
//! queue in policy order under the token budget (`min(max_prefill_tokens,
//! chunked_prefill_size)`), the running-request cap and the KV budget. The KV budget is
//! `add_one_req`'s: free plus evictable memory, minus the running requests' reserved output
//! (`min(max_new - out, 4096) x new_token_ratio`) and the full clipped output of every request
//! admitted before in this pass, must exceed the candidate's whole remaining prompt plus its
//! clipped output plus one page. A stop for memory or the request cap sets `batch_full`.

use std::time::Instant;

use super::{pages_for, FinishReason, NodeId, PrefillPart, Scheduler, Seq, CLIP_MAX_NEW_TOKENS};

impl Scheduler {
    /// Clipped output tokens `s` may still produce.
    fn clipped_remaining(s: &Seq) -> usize {
        s.req
            .max_new_tokens
            .saturating_sub(s.output_len())
            .min(CLIP_MAX_NEW_TOKENS)
    }

    /// Forms a prefill batch (empty when nothing can be admitted).
    pub(super) fn schedule_prefill(&mut self) -> Vec<Seq> {
        let p = self.limits.page_size;
        let mut rem = match self.limits.chunk_size {
            Some(c) => c.min(self.limits.max_prefill_tokens),
            None => self.limits.max_prefill_tokens,
        };
        let mut batch = Vec::new();
        let mut hits = 0usize;
        let mut input = 0usize;
        // Tokens reserved beyond the pages already allocated (SGLang's
        // `rem_total_token_offset` less the extend tokens, which the mock allocates at once).
        let mut offset: f64 = self
            .running
            .iter()
            .map(|s| Self::clipped_remaining(s) as f64 * self.new_token_ratio)
            .sum();
        if let Some(mut s) = self.chunked.take() {
            let left = s.tokens.len() - s.kv_len;
            let take = if left <= rem {
                left
            } else {
                (rem / p * p).max(p.min(left))
            };
            let need = pages_for(s.kv_len + take - s.prefix_len, p).saturating_sub(s.own_pages);
            if !self.alloc(need) {
                self.chunked = Some(s);
                return batch;
            }
            s.own_pages += need;
            s.extend = take;
            rem = rem.saturating_sub(take);
            input += take;
            let more = take < left;
            if !more {
                offset += Self::clipped_remaining(&s) as f64;
            }
            batch.push(s);
            if more {
                self.note_hit_rate(hits, input);
                return batch;
            }
        }
        if self.draining || self.waiting.is_empty() || self.batch_full {
            self.note_hit_rate(hits, input);
            return batch;
        }
        self.order_waiting();
        let now = Instant::now();
        while let Some(front) = self.waiting.front() {
            if self.running.len() + batch.len() >= self.limits.max_running {
                self.batch_full = true;
                break;
            }
            if rem == 0 {
                break;
            }
            let len = front.tokens.len();
            let ns = front.ns;
            let tree = super::uses_tree(front);
            let prebuilt = front.req.prebuilt.is_some();
            let (node, dev_len) = if tree {
                self.cache.match_prefix_in(ns, &front.tokens[..len - 1])
            } else {
                (super::ROOT, 0)
            };
            let (node, host_len) = if tree && self.cache.has_host() {
                let rest = front.tokens[dev_len..len - 1].to_vec();
                self.load_back(ns, node, &rest)
            } else {
                (node, 0)
            };
            let pre_len = dev_len + host_len;
            let Some(front) = self.waiting.front() else {
                break;
            };
            let extend = len - pre_len;
            // A PD decode's prebuilt prompt is not computed: no token budget, no chunking.
            let take = if prebuilt || extend <= rem {
                extend
            } else if self.limits.chunk_size.is_some() {
                rem / p * p
            } else if batch.is_empty() {
                extend
            } else {
                break;
            };
            if take == 0 {
                break;
            }
            let need = pages_for(take, p);
            let max_new = Self::clipped_remaining(front);
            // `_lock_node`: the candidate's own prefix is not evictable while it is checked.
            self.cache.inc_lock(node);
            let room = self.available_pages() + self.cache.evictable_pages();
            let budget = (room * p) as f64 - offset;
            if (extend + max_new + p) as f64 >= budget {
                let alone = batch.is_empty() && self.holds_no_kv();
                if !alone || need > room {
                    self.cache.dec_lock(node);
                }
                if alone && need > room {
                    // Can never fit: SGLang rejects such requests up front.
                    if let Some(s) = self.waiting.pop_front() {
                        let msg = "request needs more KV than the server has";
                        self.finish(s, FinishReason::Abort(msg.into()));
                    }
                    continue;
                }
                if !alone {
                    self.batch_full = true;
                    break;
                }
                // Alone on an idle rank: admit without the output reservation (no spin).
            }
            let ok = self.alloc(need);
            debug_assert!(ok, "room was checked");
            let Some(mut s) = self.waiting.pop_front() else {
                break;
            };
            s.node = node;
            s.prefix_len = pre_len;
            s.kv_len = pre_len;
            s.own_pages = need;
            s.extend = take;
            match s.req.prebuilt {
                // The prefill's hit plus the decode's own reuse beyond it, once.
                Some(p) if s.cached_split.is_none() => {
                    s.cached_tokens = p.cached.max(pre_len);
                    s.cached_split = Some((s.cached_tokens, 0));
                }
                Some(_) => {}
                None => {
                    s.cached_tokens += pre_len;
                    if s.cached_split.is_none() {
                        s.cached_split = Some((pre_len - host_len, host_len));
                    }
                }
            }
            s.host_loaded = host_len;
            s.queue_time = now.duration_since(s.queued_at).as_secs_f64();
            hits += pre_len;
            if !prebuilt {
                input += take;
                rem -= take;
            }
            let chunked = take < extend;
            if !chunked {
                offset += max_new as f64;
            }
            batch.push(s);
            if chunked {
                break;
            }
        }
        self.note_hit_rate(hits, input);
        batch
    }

    /// HiCache load-back at admission: the host-only continuation of a GPU match ending at
    /// `node` is loaded to the GPU when device pages can be made for it (SGLang's
    /// `init_load_back`; declined otherwise). Returns the new match end and the tokens
    /// loaded.
    fn load_back(
        &mut self,
        ns: crate::mock::cache::NsId,
        node: NodeId,
        rest: &[u32],
    ) -> (NodeId, usize) {
        let (to, host_len) = self.cache.host_match(ns, node, rest);
        if host_len == 0 {
            return (node, 0);
        }
        let pages = host_len / self.limits.page_size;
        self.cache.pin_host_path(node, to, true);
        self.cache.inc_lock(node);
        let ok = self.alloc(pages);
        self.cache.dec_lock(node);
        self.cache.pin_host_path(node, to, false);
        if !ok {
            return (node, 0);
        }
        self.free_req_pages(pages);
        let loaded = self.cache.load_back(node, to);
        debug_assert_eq!(loaded, pages, "pinned host path changed");
        (to, host_len)
    }

    /// Milliseconds of loading `tokens` back from the host: `--hicache-load-cost` times
    /// the recompute cost of the same tokens as a cold prefill, less the pass's fixed cost.
    pub(super) fn host_load_ms(&self, tokens: usize) -> f64 {
        if tokens == 0 || self.host_load_fraction == 0.0 {
            return 0.0;
        }
        let t = &self.limits.timing;
        let cold = t.prefill_ms(&[PrefillPart {
            prefix: 0,
            new: tokens,
        }]) - t.prefill_ms(&[]);
        self.host_load_fraction * cold.max(0.0)
    }

    /// SGLang's `cache_hit_rate` of the last prefill batch: hit / (hit + computed) tokens.
    fn note_hit_rate(&mut self, hits: usize, input: usize) {
        if hits + input > 0 {
            self.last_hit_rate = hits as f64 / (hits + input) as f64;
        }
    }
}
