//! The synchronous scheduler of one DP rank, modelled on SGLang's event loop without
//! mixed chunking: each iteration either runs a prefill batch (admitted FCFS under the
//! prefill token budget and chunked prefill, with the prefix matched at admission) or one
//! decode step of the running batch. KV memory is counted in pages: pages held by the
//! radix tree plus pages held by requests for tokens not (yet) in the tree.
//!
//! Replies are queued in an outbox that the async loop delivers after the simulated step
//! time has elapsed; cache events are taken from the tree by the loop.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;

use super::request::{Done, EngineRequest, FinishReason, Reply};
use super::timing::TimingModel;
use crate::mock::cache::{NodeId, RadixCache, ROOT};

/// Static limits of a rank.
#[derive(Debug, Clone)]
pub struct Limits {
    pub page_size: usize,
    pub total_tokens: usize,
    pub max_running: usize,
    pub max_prefill_tokens: usize,
    pub chunk_size: Option<usize>,
    pub timing: TimingModel,
}

/// How `/pause_generation` treats requests in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseMode {
    Abort,
    Retract,
    InPlace,
}

const INIT_NEW_TOKEN_RATIO: f64 = 0.7;
const MIN_NEW_TOKEN_RATIO: f64 = 0.1;
const NEW_TOKEN_RATIO_DECAY: f64 = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600.0;
const CLIP_MAX_NEW_TOKENS: usize = 4096;

/// A request admitted at least once (or waiting).
#[derive(Debug)]
struct Seq {
    req: EngineRequest,
    /// Prompt followed by the output so far.
    tokens: Vec<u32>,
    logprobs: Vec<f32>,
    /// Locked tree node ending the resident prefix `tokens[..prefix_len]`.
    node: NodeId,
    prefix_len: usize,
    /// Tokens whose KV is computed.
    kv_len: usize,
    /// Pages held for `tokens[prefix_len..kv_len]`.
    own_pages: usize,
    /// Tokens to compute in the current prefill round.
    extend: usize,
    cached_tokens: usize,
    first_token: Option<Instant>,
}

impl Seq {
    fn new(req: EngineRequest) -> Seq {
        let mut tokens = Vec::with_capacity(req.prompt.len() + req.max_new_tokens.min(4096));
        tokens.extend_from_slice(&req.prompt);
        let logprobs = Vec::new();
        Seq {
            req,
            tokens,
            logprobs,
            node: ROOT,
            prefix_len: 0,
            kv_len: 0,
            own_pages: 0,
            extend: 0,
            cached_tokens: 0,
            first_token: None,
        }
    }

    fn output_len(&self) -> usize {
        self.tokens.len() - self.req.prompt.len()
    }
}

/// Result of one iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepReport {
    /// Simulated duration in milliseconds (0 when idle).
    pub sim_ms: f64,
    /// Prefill tokens computed (0 for a decode step).
    pub prefill_tokens: usize,
    /// Tokens generated.
    pub generated: usize,
}

/// Counters sampled by the metrics and load endpoints.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Snapshot {
    pub running: usize,
    pub waiting: usize,
    pub used_tokens: usize,
    pub evictable_tokens: usize,
    pub tree_tokens: usize,
    pub waiting_prompt_tokens: usize,
    pub last_hit_rate: f64,
    pub decode_sum_seq_lens: usize,
}

/// Scheduler state of one rank.
#[derive(Debug)]
pub struct Scheduler {
    rank: u32,
    limits: Limits,
    total_pages: usize,
    cache: RadixCache,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    chunked: Option<Seq>,
    req_pages: usize,
    new_token_ratio: f64,
    paused: bool,
    memory_released: bool,
    /// Admission is held (a weight update waits for the rank to drain).
    draining: bool,
    weight_version: Arc<str>,
    outbox: Vec<(mpsc::UnboundedSender<Reply>, Reply)>,
    last_hit_rate: f64,
    /// Reused buffer for the decode loop.
    spare: Vec<Seq>,
}

fn pages_for(tokens: usize, page: usize) -> usize {
    tokens.div_ceil(page)
}

impl Scheduler {
    /// A rank with an empty cache (its first events are `AllBlocksCleared`).
    pub fn new(rank: u32, limits: Limits, weight_version: Arc<str>) -> Scheduler {
        let total_pages = limits.total_tokens / limits.page_size;
        Scheduler {
            rank,
            cache: RadixCache::new(limits.page_size),
            total_pages,
            limits,
            waiting: VecDeque::new(),
            running: Vec::new(),
            chunked: None,
            req_pages: 0,
            new_token_ratio: INIT_NEW_TOKEN_RATIO,
            paused: false,
            memory_released: false,
            draining: false,
            weight_version,
            outbox: Vec::new(),
            last_hit_rate: 0.0,
            spare: Vec::new(),
        }
    }

    /// The radix tree (for events).
    pub fn cache_mut(&mut self) -> &mut RadixCache {
        &mut self.cache
    }

    /// Replies produced since the last call.
    pub fn take_outbox(&mut self) -> Vec<(mpsc::UnboundedSender<Reply>, Reply)> {
        std::mem::take(&mut self.outbox)
    }

    /// Queues new requests.
    pub fn submit(&mut self, reqs: Vec<EngineRequest>) {
        self.waiting.extend(reqs.into_iter().map(Seq::new));
    }

    /// The weight version stamped on finished requests.
    pub fn set_weight_version(&mut self, v: Arc<str>) {
        self.weight_version = v;
    }

    /// True when an iteration would do something.
    pub fn has_work(&self) -> bool {
        if self.paused || self.memory_released {
            return false;
        }
        self.chunked.is_some()
            || !self.running.is_empty()
            || (!self.waiting.is_empty() && !self.draining)
    }

    /// No request holds KV (running or mid-chunk).
    pub fn holds_no_kv(&self) -> bool {
        self.running.is_empty() && self.chunked.is_none()
    }

    /// SGLang's flush condition: nothing holds KV and (unless paused) nothing waits.
    pub fn idle_for_flush(&self) -> bool {
        self.holds_no_kv() && (self.paused || self.waiting.is_empty())
    }

    /// Drops every cached page if idle; returns whether it flushed.
    pub fn flush(&mut self) -> bool {
        if !self.idle_for_flush() {
            return false;
        }
        self.cache.reset();
        self.req_pages = 0;
        true
    }

    /// Drops every cached page when no request holds KV (waiting ones may exist).
    pub fn reset_cache_if_no_kv(&mut self) -> bool {
        if !self.holds_no_kv() {
            return false;
        }
        self.cache.reset();
        self.req_pages = 0;
        true
    }

    /// Holds (or releases) admission of new prefill work.
    pub fn set_draining(&mut self, on: bool) {
        self.draining = on;
    }

    /// Pauses generation.
    pub fn pause(&mut self, mode: PauseMode) {
        match mode {
            PauseMode::Abort => self.abort(None, true, "Abort by pause_generation"),
            PauseMode::Retract => {
                let mut retracted: Vec<Seq> = self.running.drain(..).collect();
                retracted.extend(self.chunked.take());
                for s in retracted.into_iter().rev() {
                    let s = self.retract(s);
                    self.waiting.push_front(s);
                }
            }
            PauseMode::InPlace => {}
        }
        self.paused = true;
    }

    /// Resumes generation.
    pub fn resume(&mut self) {
        self.paused = false;
    }

    /// Whether generation is paused.
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// Releases (or re-acquires) KV memory; release needs the rank idle and flushes.
    pub fn set_memory_released(&mut self, released: bool, flush_kv: bool) -> bool {
        if released {
            if !self.idle_for_flush() {
                return false;
            }
            if flush_kv {
                self.flush();
            }
        }
        self.memory_released = released;
        true
    }

    /// Aborts requests whose rid starts with `rid` (or all).
    pub fn abort(&mut self, rid: Option<&str>, all: bool, message: &str) {
        let hit = |s: &Seq| all || rid.is_some_and(|r| !r.is_empty() && s.req.rid.starts_with(r));
        let mut i = 0;
        while i < self.waiting.len() {
            if hit(&self.waiting[i]) {
                if let Some(s) = self.waiting.remove(i) {
                    self.finish(s, FinishReason::Abort(message.to_string()));
                }
            } else {
                i += 1;
            }
        }
        let mut i = 0;
        while i < self.running.len() {
            if hit(&self.running[i]) {
                let s = self.running.swap_remove(i);
                self.finish(s, FinishReason::Abort(message.to_string()));
            } else {
                i += 1;
            }
        }
        if self.chunked.as_ref().is_some_and(hit) {
            if let Some(s) = self.chunked.take() {
                self.finish(s, FinishReason::Abort(message.to_string()));
            }
        }
    }

    /// Counters for metrics and load reporting.
    pub fn snapshot(&self) -> Snapshot {
        let p = self.limits.page_size;
        let used_pages = self.cache.tree_pages() + self.req_pages;
        Snapshot {
            running: self.running.len() + usize::from(self.chunked.is_some()),
            waiting: self.waiting.len(),
            used_tokens: (used_pages - self.cache.evictable_pages()) * p,
            evictable_tokens: self.cache.evictable_pages() * p,
            tree_tokens: self.cache.tree_pages() * p,
            waiting_prompt_tokens: self.waiting.iter().map(|s| s.tokens.len()).sum(),
            last_hit_rate: self.last_hit_rate,
            decode_sum_seq_lens: self.running.iter().map(|s| s.kv_len).sum(),
        }
    }

    /// Runs one iteration.
    pub fn step(&mut self) -> StepReport {
        let idle = StepReport {
            sim_ms: 0.0,
            prefill_tokens: 0,
            generated: 0,
        };
        if self.paused || self.memory_released {
            return idle;
        }
        self.drop_disconnected();
        let batch = self.schedule_prefill();
        if !batch.is_empty() {
            return self.run_prefill(batch);
        }
        if !self.running.is_empty() {
            return self.run_decode();
        }
        idle
    }

    fn available_pages(&self) -> usize {
        self.total_pages
            .saturating_sub(self.cache.tree_pages() + self.req_pages)
    }

    /// Allocates `n` request pages, evicting unlocked cache leaves as needed.
    fn alloc(&mut self, n: usize) -> bool {
        let avail = self.available_pages();
        if avail < n {
            self.cache.evict(n - avail);
        }
        if self.available_pages() < n {
            return false;
        }
        self.req_pages += n;
        true
    }

    /// Returns request pages to the pool (accounting errors are bugs: loud in debug builds,
    /// clamped in release so a server never wraps around).
    fn free_req_pages(&mut self, n: usize) {
        debug_assert!(n <= self.req_pages, "freeing more pages than requests hold");
        self.req_pages = self.req_pages.saturating_sub(n);
    }

    fn drop_disconnected(&mut self) {
        let closed = |s: &Seq| s.req.reply.is_closed();
        if self.waiting.iter().any(closed)
            || self.running.iter().any(closed)
            || self.chunked.as_ref().is_some_and(closed)
        {
            let mut gone = Vec::new();
            self.waiting.retain(|s| !closed(s));
            let mut i = 0;
            while i < self.running.len() {
                if closed(&self.running[i]) {
                    gone.push(self.running.swap_remove(i));
                } else {
                    i += 1;
                }
            }
            if self.chunked.as_ref().is_some_and(closed) {
                gone.extend(self.chunked.take());
            }
            for s in gone {
                self.release(s, true);
            }
        }
    }

    /// Forms a prefill batch (SGLang `get_new_batch_prefill`, FCFS).
    fn schedule_prefill(&mut self) -> Vec<Seq> {
        let p = self.limits.page_size;
        let mut rem = match self.limits.chunk_size {
            Some(c) => c.min(self.limits.max_prefill_tokens),
            None => self.limits.max_prefill_tokens,
        };
        let mut batch = Vec::new();
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
            let more = take < left;
            batch.push(s);
            if more {
                return batch;
            }
        }
        if self.draining {
            return batch;
        }
        let mut reserved: usize = self
            .running
            .iter()
            .map(|s| self.future_pages(s.req.max_new_tokens.saturating_sub(s.output_len())))
            .sum();
        let mut hits = 0usize;
        let mut total = 0usize;
        while let Some(front) = self.waiting.front() {
            if self.running.len() + batch.len() >= self.limits.max_running || rem == 0 {
                break;
            }
            let len = front.tokens.len();
            let (node, pre_len) = self.cache.match_prefix(&front.tokens[..len - 1]);
            let extend = len - pre_len;
            let take = if extend <= rem {
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
            let future = if take == extend {
                self.future_pages(front.req.max_new_tokens.saturating_sub(front.output_len()))
            } else {
                0
            };
            self.cache.inc_lock(node);
            let room = self.available_pages() + self.cache.evictable_pages();
            if need + future + reserved > room {
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
                    break;
                }
                // Alone on an idle rank: admit without the decode reservation (no spin).
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
            s.cached_tokens += pre_len;
            hits += pre_len;
            total += len;
            rem -= take;
            reserved += future;
            let chunked = take < extend;
            batch.push(s);
            if chunked {
                break;
            }
        }
        if total > 0 {
            self.last_hit_rate = hits as f64 / total as f64;
        }
        batch
    }

    fn future_pages(&self, remaining_out: usize) -> usize {
        let t = remaining_out.min(CLIP_MAX_NEW_TOKENS) as f64 * self.new_token_ratio;
        pages_for(t as usize, self.limits.page_size)
    }

    fn run_prefill(&mut self, batch: Vec<Seq>) -> StepReport {
        let computed: usize = batch.iter().map(|s| s.extend).sum();
        let mut generated = 0;
        for mut s in batch {
            s.kv_len += s.extend;
            s.extend = 0;
            self.cache_unfinished(&mut s);
            if s.kv_len < s.tokens.len() {
                self.chunked = Some(s);
                continue;
            }
            if s.output_len() >= s.req.max_new_tokens {
                self.finish(s, FinishReason::Length(0));
                continue;
            }
            generated += 1;
            if let Some(reason) = self.emit_token(&mut s) {
                self.finish(s, reason);
            } else {
                self.running.push(s);
            }
        }
        StepReport {
            sim_ms: self.limits.timing.prefill_ms(computed),
            prefill_tokens: computed,
            generated,
        }
    }

    fn run_decode(&mut self) -> StepReport {
        let p = self.limits.page_size;
        // Memory for one more token per request; retract under pressure.
        loop {
            let need: usize = self
                .running
                .iter()
                .filter(|s| (s.kv_len - s.prefix_len) % p == 0)
                .count();
            if need <= self.available_pages() + self.cache.evictable_pages()
                || self.running.len() <= 1
            {
                break;
            }
            // Retract the request with the fewest outputs (longest prompt on ties).
            let victim = (0..self.running.len())
                .min_by_key(|&i| {
                    (
                        self.running[i].output_len(),
                        usize::MAX - self.running[i].req.prompt.len(),
                    )
                })
                .unwrap_or(0);
            let s = self.running.swap_remove(victim);
            let s = self.retract(s);
            self.waiting.push_front(s);
            self.new_token_ratio = INIT_NEW_TOKEN_RATIO;
        }
        let active: usize = self.running.iter().map(|s| s.kv_len + 1).sum();
        let u = active as f64 / self.limits.total_tokens as f64;
        let mut generated = 0;
        let mut batch = std::mem::take(&mut self.running);
        let mut keep = std::mem::take(&mut self.spare);
        for mut s in batch.drain(..) {
            let need = usize::from((s.kv_len - s.prefix_len) % p == 0);
            if !self.alloc(need) {
                // A lone request that cannot grow: finish it rather than spin.
                self.finish(s, FinishReason::Abort("out of KV memory".into()));
                continue;
            }
            s.own_pages += need;
            s.kv_len += 1;
            generated += 1;
            match self.emit_token(&mut s) {
                Some(reason) => self.finish(s, reason),
                None => keep.push(s),
            }
        }
        self.running = keep;
        self.spare = batch;
        self.new_token_ratio =
            (self.new_token_ratio - NEW_TOKEN_RATIO_DECAY).max(MIN_NEW_TOKEN_RATIO);
        StepReport {
            sim_ms: self.limits.timing.decode_ms(u),
            prefill_tokens: 0,
            generated,
        }
    }

    /// Appends the next pseudo-token; returns a finish reason when the request is done.
    fn emit_token(&mut self, s: &mut Seq) -> Option<FinishReason> {
        let i = s.output_len();
        let (token, logprob) = s.req.sampler.token(i);
        s.tokens.push(token);
        s.logprobs.push(logprob);
        if s.first_token.is_none() {
            s.first_token = Some(Instant::now());
        }
        let reason = if !s.req.ignore_eos && s.req.stop_token_ids.contains(&token) {
            Some(FinishReason::Stop(token))
        } else if i + 1 >= s.req.max_new_tokens {
            Some(FinishReason::Length(s.req.max_new_tokens))
        } else {
            None
        };
        // The finishing token travels in `Done` (SGLang's final chunk carries it).
        if reason.is_none() && s.req.stream {
            self.outbox.push((
                s.req.reply.clone(),
                Reply::Step {
                    index: s.req.index,
                    token,
                    logprob,
                    cached_tokens: s.cached_tokens,
                },
            ));
        }
        reason
    }

    /// `cache_unfinished_req`: inserts the computed pages and moves the lock.
    fn cache_unfinished(&mut self, s: &mut Seq) {
        let p = self.limits.page_size;
        let ins = self.cache.insert(&s.tokens[..s.kv_len]);
        self.cache.inc_lock(ins.node);
        self.cache.dec_lock(s.node);
        s.node = ins.node;
        let own = pages_for(s.kv_len - ins.covered, p);
        self.free_req_pages(s.own_pages - own.min(s.own_pages));
        s.own_pages = own.min(s.own_pages);
        s.prefix_len = ins.covered;
    }

    /// Frees a request's KV: inserts computed pages when `insert`, unlocks, frees pages.
    fn release(&mut self, s: Seq, insert: bool) {
        if insert && s.kv_len > 0 {
            self.cache.insert(&s.tokens[..s.kv_len]);
        }
        self.cache.dec_lock(s.node);
        self.free_req_pages(s.own_pages);
    }

    fn retract(&mut self, mut s: Seq) -> Seq {
        let node = s.node;
        self.cache.dec_lock(node);
        self.free_req_pages(s.own_pages);
        s.node = ROOT;
        s.prefix_len = 0;
        s.kv_len = 0;
        s.own_pages = 0;
        s
    }

    fn finish(&mut self, s: Seq, finish: FinishReason) {
        let prompt_len = s.req.prompt.len();
        let node = s.node;
        if s.kv_len > 0 {
            self.cache.insert(&s.tokens[..s.kv_len]);
        }
        self.cache.dec_lock(node);
        self.free_req_pages(s.own_pages);
        let ttft = s
            .first_token
            .map(|t| t.duration_since(s.req.arrival).as_secs_f64());
        let Seq {
            req,
            mut tokens,
            logprobs,
            cached_tokens,
            ..
        } = s;
        let output_ids = tokens.split_off(prompt_len);
        let done = Done {
            index: req.index,
            rid: req.rid,
            output_ids,
            logprobs,
            finish,
            prompt_tokens: prompt_len,
            cached_tokens,
            weight_version: self.weight_version.clone(),
            dp_rank: self.rank,
            ttft,
        };
        self.outbox.push((req.reply, Reply::Done(Box::new(done))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::sampler::Sampler;

    fn limits(total: usize, chunk: Option<usize>) -> Limits {
        Limits {
            page_size: 4,
            total_tokens: total,
            max_running: 8,
            max_prefill_tokens: 16384,
            chunk_size: chunk,
            timing: TimingModel::default(),
        }
    }

    fn req(
        prompt: Vec<u32>,
        max_new: usize,
        tx: &mpsc::UnboundedSender<Reply>,
        index: u32,
    ) -> EngineRequest {
        EngineRequest {
            rid: format!("r{index}"),
            index,
            sampler: Sampler::new(0, &prompt, None, 0, 32000),
            prompt,
            max_new_tokens: max_new,
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            stream: false,
            reply: tx.clone(),
            arrival: Instant::now(),
        }
    }

    fn run_until_idle(s: &mut Scheduler) -> Vec<Done> {
        let mut done = Vec::new();
        for _ in 0..10_000 {
            if !s.has_work() {
                break;
            }
            s.step();
            for (_, r) in s.take_outbox() {
                if let Reply::Done(d) = r {
                    done.push(*d);
                }
            }
        }
        done.sort_by_key(|d| d.index);
        done
    }

    #[test]
    fn memory_is_conserved_and_released() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let mut s = Scheduler::new(0, limits(256, Some(8)), Arc::from("v"));
        s.submit(
            (0..5)
                .map(|i| req((0..30).map(|t| t + i * 100).collect(), 7, &tx, i))
                .collect(),
        );
        let done = run_until_idle(&mut s);
        assert_eq!(done.len(), 5);
        assert!(done
            .iter()
            .all(|d| d.output_ids.len() == 7 && d.finish == FinishReason::Length(7)));
        assert_eq!(s.req_pages, 0, "requests hold no pages when idle");
        assert_eq!(
            s.cache.evictable_pages(),
            s.cache.tree_pages(),
            "nothing stays locked"
        );
        assert!(s.cache.tree_pages() <= s.total_pages);
    }

    #[test]
    fn pressure_retracts_then_completes() {
        let (tx, _rx) = mpsc::unbounded_channel();
        // 12 pages; 3 requests of 8-token prompts growing to 28 tokens each need 21 pages.
        let mut s = Scheduler::new(0, limits(48, None), Arc::from("v"));
        s.submit(
            (0..3)
                .map(|i| req((0..8).map(|t| t + i * 50).collect(), 20, &tx, i))
                .collect(),
        );
        let done = run_until_idle(&mut s);
        assert_eq!(done.len(), 3);
        let reasons: Vec<&FinishReason> = done.iter().map(|d| &d.finish).collect();
        assert!(done.iter().all(|d| d.output_ids.len() == 20), "{reasons:?}");
        assert_eq!(s.req_pages, 0);
    }

    #[test]
    fn oversized_request_is_aborted_not_spun() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let mut s = Scheduler::new(0, limits(16, None), Arc::from("v"));
        s.submit(vec![req((0..40).collect(), 1, &tx, 0)]);
        let done = run_until_idle(&mut s);
        assert!(matches!(done[0].finish, FinishReason::Abort(_)));
        assert!(!s.has_work());
    }

    #[test]
    fn abort_by_rid_prefix_and_pause_modes() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let mut s = Scheduler::new(0, limits(1024, None), Arc::from("v"));
        s.submit(vec![
            req(vec![1, 2, 3], 100, &tx, 0),
            req(vec![4, 5, 6], 100, &tx, 1),
        ]);
        s.step();
        s.take_outbox();
        s.abort(Some("r1"), false, "x");
        assert_eq!(s.take_outbox().len(), 1);
        s.pause(PauseMode::InPlace);
        assert!(!s.flush(), "in-place pause keeps KV");
        s.resume();
        s.pause(PauseMode::Retract);
        assert!(s.flush(), "retracted requests hold no KV");
        s.resume();
        let done = run_until_idle(&mut s);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].output_ids.len(), 100);
    }

    #[test]
    fn events_replayed_reproduce_the_resident_set() {
        use crate::mock::cache::CacheEvent;
        use rand::{Rng, SeedableRng};
        use std::collections::HashSet;
        let (tx, _rx) = mpsc::unbounded_channel();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut s = Scheduler::new(0, limits(160, Some(12)), Arc::from("v"));
        let mut resident: HashSet<i64> = HashSet::new();
        let mut removals = 0usize;
        let mut apply = |evs: Vec<CacheEvent>, resident: &mut HashSet<i64>| {
            for e in evs {
                match e {
                    CacheEvent::Stored { hashes, .. } => resident.extend(hashes),
                    CacheEvent::Removed { hashes } => {
                        removals += 1;
                        for h in hashes {
                            assert!(resident.remove(&h), "removed a block never stored");
                        }
                    }
                    CacheEvent::Cleared => resident.clear(),
                }
            }
        };
        for round in 0..40u32 {
            let n = rng.random_range(1..5);
            let reqs = (0..n)
                .map(|i| {
                    let shared = rng.random_range(0..3u32) * 1000;
                    let len = rng.random_range(1..40usize);
                    let prompt: Vec<u32> = (0..len as u32)
                        .map(|t| if t < 16 { shared + t } else { round * 100 + t })
                        .collect();
                    req(prompt, rng.random_range(1..10), &tx, i)
                })
                .collect();
            if round % 13 == 12 {
                assert!(s.flush(), "idle rank flushes");
            }
            s.submit(reqs);
            while s.has_work() {
                s.step();
                s.take_outbox();
                let evs = s.cache_mut().take_events();
                apply(evs, &mut resident);
            }
            let evs = s.cache_mut().take_events();
            apply(evs, &mut resident);
            assert_eq!(resident, s.cache.resident_hashes(), "round {round}");
            assert_eq!(s.req_pages, 0);
        }
        assert!(removals > 0, "the workload exercised eviction");
    }
}
