//! The synchronous scheduler of one DP rank, modelled on SGLang's event loop without
//! mixed chunking (`managers/scheduler.py` `get_next_batch_to_run`): each iteration either
//! runs a prefill batch (`admit.rs`: the waiting queue ordered by `policy.rs`, admitted under
//! the prefill token budget, chunked prefill and the KV reservation, prefix matched at
//! admission) or one decode step of the running batch (`retract.rs` retracts first when KV
//! runs out). KV memory is counted in pages: pages held by the radix tree plus pages held by
//! requests for tokens not (yet) in the tree.
//!
//! Replies are queued in an outbox that the async loop delivers after the simulated step
//! time has elapsed; cache events are taken from the tree by the loop.

mod admit;
mod policy;
mod retract;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;

use super::request::{Done, EngineRequest, FinishReason, Reply};
use super::timing::{PrefillPart, TimingModel};
use crate::mock::cache::{NodeId, NsId, RadixCache, PLAIN, ROOT};

pub use policy::SchedulePolicy;

/// Static limits of a rank.
#[derive(Debug, Clone)]
pub struct Limits {
    pub page_size: usize,
    pub total_tokens: usize,
    pub max_running: usize,
    pub max_prefill_tokens: usize,
    pub chunk_size: Option<usize>,
    pub timing: TimingModel,
    pub policy: SchedulePolicy,
}

/// How `/pause_generation` treats requests in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseMode {
    Abort,
    Retract,
    InPlace,
}

// SGLang `environ.py` defaults (`SGLANG_INIT_NEW_TOKEN_RATIO`, `_MIN_NEW_TOKEN_RATIO_FACTOR`,
// `_NEW_TOKEN_RATIO_DECAY_STEPS`, `_RETRACT_DECODE_STEPS`, `_CLIP_MAX_NEW_TOKENS_ESTIMATION`),
// with `schedule_conservativeness` 1.0.
const INIT_NEW_TOKEN_RATIO: f64 = 0.7;
const MIN_NEW_TOKEN_RATIO: f64 = INIT_NEW_TOKEN_RATIO * 0.14;
const NEW_TOKEN_RATIO_DECAY: f64 = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600.0;
const RETRACT_DECODE_STEPS: usize = 20;
const CLIP_MAX_NEW_TOKENS: usize = 4096;

/// A request admitted at least once (or waiting).
#[derive(Debug)]
struct Seq {
    req: EngineRequest,
    /// The request's cache namespace (interned in this rank's tree).
    ns: NsId,
    /// Tokens loaded back from the host tier for the current prefill round.
    host_loaded: usize,
    /// SGLang's `cached_tokens_device` / `cached_tokens_host` of the first admission
    /// (`split_cached_prefix_by_tier`), `None` before it.
    cached_split: Option<(usize, usize)>,
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
    /// Last entry into the waiting queue (arrival, or the last retraction).
    queued_at: Instant,
    /// Seconds from `queued_at` to the admission that followed it (SGLang `queue_time`).
    queue_time: f64,
    /// Simulated ms of the prefill pass that completed the prompt.
    prefill_ms: f64,
    retractions: u32,
}

impl Seq {
    fn new(req: EngineRequest) -> Seq {
        let mut tokens = Vec::with_capacity(req.prompt.len() + req.max_new_tokens.min(4096));
        tokens.extend_from_slice(&req.prompt);
        let logprobs = Vec::new();
        let queued_at = req.arrival;
        Seq {
            req,
            ns: PLAIN,
            host_loaded: 0,
            cached_split: None,
            tokens,
            logprobs,
            node: ROOT,
            prefix_len: 0,
            kv_len: 0,
            own_pages: 0,
            extend: 0,
            cached_tokens: 0,
            first_token: None,
            queued_at,
            queue_time: 0.0,
            prefill_ms: 0.0,
            retractions: 0,
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
    /// SGLang `running_batch.batch_is_full`: set when admission stopped for memory or the
    /// running-request cap, cleared when the running batch shrinks.
    batch_full: bool,
    /// Reused buffer for the decode loop.
    spare: Vec<Seq>,
    /// A host-tier load-back costs this fraction of recomputing the tokens.
    host_load_fraction: f64,
    /// PD prefill: finished requests whose KV stays locked until their transfer ends, by
    /// hold id: (locked node, own pages).
    held: std::collections::HashMap<u64, (NodeId, usize)>,
}

/// False for a PD decode request without the decode radix cache (SGLang's decode runs with
/// `disable_radix_cache` unless `--disaggregation-decode-enable-radix-cache`,
/// `arg_groups/pd_disaggregation_hook.py`): it neither matches nor inserts.
fn uses_tree(s: &Seq) -> bool {
    s.req.prebuilt.is_none_or(|p| p.radix)
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
            batch_full: false,
            spare: Vec::new(),
            host_load_fraction: 0.0,
            held: std::collections::HashMap::new(),
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

    /// Queues new requests, interning their namespaces (and registering adapter names for
    /// KV events) on arrival as SGLang's `handle_generate_request` does.
    pub fn submit(&mut self, reqs: Vec<EngineRequest>) {
        for r in reqs {
            let ns = self.cache.namespace(&r.ns);
            let mut s = Seq::new(r);
            s.ns = ns;
            self.waiting.push_back(s);
        }
    }

    /// The device-resident prefix of `tokens[..len-1]` in namespace `ns` (what admission
    /// would match now; PD decode's `decode_prefix_len`).
    pub fn prefix_len(&mut self, ns: &crate::mock::cache::Namespace, tokens: &[u32]) -> usize {
        if tokens.len() < 2 {
            return 0;
        }
        let ns = self.cache.namespace(ns);
        self.cache
            .match_prefix_in(ns, &tokens[..tokens.len() - 1])
            .1
    }

    /// Sets the cost of a host-tier load-back as a fraction of recomputing the tokens.
    pub fn set_host_load_fraction(&mut self, f: f64) {
        self.host_load_fraction = f;
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

    /// No request holds KV (running, mid-chunk, or a PD prefill's held transfer).
    pub fn holds_no_kv(&self) -> bool {
        self.running.is_empty() && self.chunked.is_none() && self.held.is_empty()
    }

    /// Unlocks and frees a PD prefill's held KV (no-op for an unknown id).
    pub fn release_held(&mut self, id: u64) {
        if let Some((node, pages)) = self.held.remove(&id) {
            self.cache.dec_lock(node);
            self.free_req_pages(pages);
            self.batch_full = false;
        }
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
                // `retract_all` then `_add_request_to_queue`: appended to the queue.
                let mut retracted: Vec<Seq> = self.running.drain(..).collect();
                retracted.extend(self.chunked.take());
                for s in retracted {
                    let s = self.retract(s);
                    self.waiting.push_back(s);
                }
                self.batch_full = false;
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
        self.batch_full = false;
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
        if self.running.is_empty() {
            self.batch_full = false;
        }
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
            self.batch_full = false;
        }
    }

    fn run_prefill(&mut self, batch: Vec<Seq>) -> StepReport {
        // A PD decode's prebuilt prompt arrived by transfer: nothing to compute.
        let computed: usize = batch
            .iter()
            .filter(|s| s.req.prebuilt.is_none())
            .map(|s| s.extend)
            .sum();
        let parts: Vec<PrefillPart> = batch
            .iter()
            .filter(|s| s.req.prebuilt.is_none())
            .map(|s| PrefillPart {
                prefix: s.kv_len,
                new: s.extend,
            })
            .collect();
        let loaded: usize = batch.iter().map(|s| s.host_loaded).sum();
        let sim_ms = if parts.is_empty() && loaded == 0 {
            0.0
        } else {
            self.limits.timing.prefill_ms(&parts) + self.host_load_ms(loaded)
        };
        let mut generated = 0;
        for mut s in batch {
            s.prefill_ms = sim_ms;
            s.kv_len += s.extend;
            s.extend = 0;
            s.host_loaded = 0;
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
            sim_ms,
            prefill_tokens: computed,
            generated,
        }
    }

    fn run_decode(&mut self) -> StepReport {
        let p = self.limits.page_size;
        let retracted = self.ensure_decode_memory();
        let before = self.running.len();
        // Each request reads its KV and writes one more token's.
        let active: usize = self.running.iter().map(|s| s.kv_len + 1).sum();
        let u = active as f64 / self.limits.total_tokens as f64;
        let sim_ms = self.limits.timing.decode_ms(before, active, u);
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
        if self.running.len() < before {
            self.batch_full = false;
        }
        if !retracted {
            self.new_token_ratio =
                (self.new_token_ratio - NEW_TOKEN_RATIO_DECAY).max(MIN_NEW_TOKEN_RATIO);
        }
        StepReport {
            sim_ms,
            prefill_tokens: 0,
            generated,
        }
    }

    /// Appends the next pseudo-token; returns a finish reason when the request is done.
    fn emit_token(&mut self, s: &mut Seq) -> Option<FinishReason> {
        let i = s.output_len();
        let (token, logprob) = match s.req.prebuilt {
            Some(p) if i == 0 => p.first,
            _ => s.req.sampler.token(i),
        };
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
        if !uses_tree(s) {
            return;
        }
        let p = self.limits.page_size;
        let ins = self.cache.insert_in(s.ns, &s.tokens[..s.kv_len]);
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
        if insert && s.kv_len > 0 && uses_tree(&s) {
            self.cache.insert_in(s.ns, &s.tokens[..s.kv_len]);
        }
        self.cache.dec_lock(s.node);
        self.free_req_pages(s.own_pages);
    }

    fn finish(&mut self, s: Seq, finish: FinishReason) {
        let prompt_len = s.req.prompt.len();
        let node = s.node;
        if s.kv_len > 0 && uses_tree(&s) {
            self.cache.insert_in(s.ns, &s.tokens[..s.kv_len]);
        }
        match s.req.hold {
            Some(id) if !matches!(finish, FinishReason::Abort(_)) => {
                self.held.insert(id, (node, s.own_pages));
            }
            _ => {
                self.cache.dec_lock(node);
                self.free_req_pages(s.own_pages);
            }
        }
        let ttft = s
            .first_token
            .map(|t| t.duration_since(s.req.arrival).as_secs_f64());
        let Seq {
            req,
            mut tokens,
            logprobs,
            cached_tokens,
            cached_split,
            queue_time,
            prefill_ms,
            retractions,
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
            cached_split,
            weight_version: self.weight_version.clone(),
            dp_rank: self.rank,
            ttft,
            queue_time,
            prefill_ms,
            prefill_secs: 0.0,
            retractions,
            input_logprobs: Vec::new(),
        };
        self.outbox.push((req.reply, Reply::Done(Box::new(done))));
    }
}

#[cfg(test)]
mod tests;
