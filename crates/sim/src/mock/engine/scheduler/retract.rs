//! Decode memory and retraction (SGLang `ScheduleBatch.check_decode_mem`, `retract_decode`
//! and `release_req` in `managers/schedule_batch.py`, called from
//! `Scheduler.update_running_batch`). When the next decode step's new pages do not fit in
//! free plus evictable memory, requests are retracted in SGLang's order (fewest output
//! tokens first, the longest prompt among equals) until the rest fit, always at least one
//! and never the last. A retracted request's KV beyond its cached prefix is freed, not
//! inserted into the tree; its prefix is unlocked; the tree is then evicted so that the
//! remaining requests have `RETRACT_DECODE_STEPS` tokens each of free memory. Retracted
//! requests are appended to the waiting queue, and `new_token_ratio` becomes
//! `min(1, (decoded + 20 x remaining) / (sum max_new + 1))` over the remaining requests.

use std::cmp::Reverse;
use std::time::Instant;

use super::{pages_for, Scheduler, Seq, RETRACT_DECODE_STEPS, ROOT};

impl Scheduler {
    /// Pages the next decode step allocates (one per request at a page boundary).
    fn decode_pages_needed(&self) -> usize {
        let p = self.limits.page_size;
        self.running
            .iter()
            .filter(|s| (s.kv_len - s.prefix_len) % p == 0)
            .count()
    }

    fn decode_fits(&self) -> bool {
        self.decode_pages_needed() <= self.available_pages() + self.cache.evictable_pages()
    }

    /// Retracts running requests until the next decode step fits (see the module doc);
    /// returns whether it did (then `new_token_ratio` was reset, not decayed).
    pub(super) fn ensure_decode_memory(&mut self) -> bool {
        if self.decode_fits() {
            return false;
        }
        // Sorted so that popping from the back takes fewest outputs, then longest prompt.
        self.running
            .sort_by_key(|s| Reverse((s.output_len(), Reverse(s.req.prompt.len()))));
        let p = self.limits.page_size;
        let mut retracted = Vec::new();
        let mut first = true;
        while first || !self.decode_fits() {
            if self.running.len() <= 1 {
                break;
            }
            first = false;
            let Some(s) = self.running.pop() else {
                break;
            };
            retracted.push(self.retract(s));
            let want = self.running.len() * RETRACT_DECODE_STEPS;
            let free = self.available_pages() * p;
            if free < want {
                self.cache.evict(pages_for(want - free, p));
            }
        }
        let decoded: usize = self.running.iter().map(Seq::output_len).sum();
        let max_new: usize = self.running.iter().map(|s| s.req.max_new_tokens).sum();
        let est =
            (decoded + RETRACT_DECODE_STEPS * self.running.len()) as f64 / (max_new + 1) as f64;
        self.new_token_ratio = est.min(1.0);
        self.waiting.extend(retracted);
        self.batch_full = false;
        true
    }

    /// Frees a request's KV without inserting it (`release_kv_cache(is_insert=False)`) and
    /// resets it for recomputation; it keeps its output tokens (`reset_for_retract`).
    pub(super) fn retract(&mut self, mut s: Seq) -> Seq {
        self.cache.dec_lock(s.node);
        self.free_req_pages(s.own_pages);
        s.node = ROOT;
        s.prefix_len = 0;
        s.kv_len = 0;
        s.own_pages = 0;
        s.retractions += 1;
        s.queued_at = Instant::now();
        s
    }
}
