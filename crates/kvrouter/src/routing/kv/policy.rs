//! `KvPolicy`: KV-aware routing over (worker, DP rank) units.
//!
//! Per request: hash the `input_ids` into chained block hashes, `find_matches` in the index,
//! score every candidate unit with the cost model in seconds (`cost.rs`) at that unit's
//! learned rates (`timing/`), pick, then book: the unit's load (`load.rs`) and, with
//! predict-on-route, the blocks in the index (`KvIndex::book`).
//! Requests without token ids are scored by load alone and counted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::attachment::{KvAttachment, TimingProbe};
use super::cost::{cost, pick, UnitInputs};
use super::load::UnitLoads;
use super::metrics::KvMetrics;
use super::timing::TimingModel;
use crate::config::KvConfig;
use crate::index::{KvIndex, Unit};
use crate::routing::input::RoutingInput;
use crate::routing::policy::{Choice, Policy};
use crate::tokens::seq_hashes;
use crate::workers::{Rank, Worker};

/// A unit whose request count would exceed this factor times the mean (plus the slack) is
/// skipped while another unit is not.
const BALANCE_FACTOR: f64 = 1.2;
const BALANCE_SLACK: f64 = 3.0;
/// Added to an over-cap unit's cost: larger than any real difference in seconds.
const OVER_CAP: f64 = 1e9;

/// Settings of the KV policy (from `config::KvConfig`).
#[derive(Debug, Clone, Copy)]
pub struct KvPolicySettings {
    pub temperature: f64,
    /// `None` = `--no-predict`.
    pub predict_ttl: Option<Duration>,
    /// How long after its prefill a prediction may wait for its `BlockStored`.
    pub predict_confirm: Duration,
}

impl KvPolicySettings {
    pub fn from_config(c: &KvConfig) -> Self {
        KvPolicySettings {
            temperature: c.temperature,
            predict_ttl: c.predict.then_some(c.predict_ttl),
            predict_confirm: c.predict_confirm,
        }
    }
}

/// One scored unit.
#[derive(Debug, Clone, Copy)]
struct Scored {
    candidate: usize,
    rank: Rank,
    /// Seconds (see `cost.rs`).
    cost: f64,
    /// Expected time to first token there, seconds.
    ttft: f64,
    /// Leading request blocks cached or in prefill there.
    overlap: u32,
    /// Seconds of prefill the unit's overlap saves (what a move away from it throws away).
    prefix_secs: f64,
    inputs: UnitInputs,
}

/// The KV-aware policy (see module docs).
pub struct KvPolicy {
    index: Arc<KvIndex>,
    loads: Arc<UnitLoads>,
    timing: Arc<TimingModel>,
    settings: KvPolicySettings,
}

impl KvPolicy {
    pub fn new(
        index: Arc<KvIndex>,
        loads: Arc<UnitLoads>,
        timing: Arc<TimingModel>,
        settings: KvPolicySettings,
    ) -> Self {
        KvPolicy {
            index,
            loads,
            timing,
            settings,
        }
    }

    /// The index this policy reads and books.
    pub fn index(&self) -> &Arc<KvIndex> {
        &self.index
    }

    /// The learned rates.
    pub fn timing(&self) -> &Arc<TimingModel> {
        &self.timing
    }

    fn choose(
        &self,
        input: &RoutingInput<'_>,
        candidates: &[Arc<Worker>],
        preferred: Option<usize>,
    ) -> Option<Choice> {
        if candidates.is_empty() {
            return None;
        }
        let m = KvMetrics::get();
        let page = self.index.page_size() as usize;
        let t0 = Instant::now();
        let tokens = match input.token_ids() {
            Some(Ok(t)) => t,
            other => {
                let reason = match other {
                    Some(Err(_)) => "invalid_token_ids",
                    _ if input.is_batch() => "batch",
                    _ => "no_token_ids",
                };
                m.no_tokens.with_label_values(&[reason]).inc();
                Vec::new()
            }
        };
        let seqs = seq_hashes(&tokens, page);
        let t1 = Instant::now();
        let overlaps = self.index.find_matches(&seqs);
        let t2 = Instant::now();
        let request_blocks = overlaps.request_blocks;
        // Identical prompts (siblings) share a prefill: tell their load apart.
        let prompt_key = seqs.last().copied();
        let out = self.timing.expected_output();
        let len = tokens.len() as f64;
        let pagef = page as f64;
        let mut scored: Vec<Scored> = Vec::with_capacity(candidates.len());
        for (i, worker) in candidates.iter().enumerate() {
            for rank in worker.ranks() {
                let unit = Unit::new(worker.id, rank);
                let ov = overlaps.get(unit).copied();
                let load = self.loads.view(worker.id, rank, prompt_key);
                let cached = ov.map_or(0, |o| o.cached());
                let inflight = ov.map_or(0, |o| o.inflight);
                let overlap = cached.max(inflight).min(request_blocks);
                let queued = self
                    .index
                    .inflight_blocks(worker.id, rank)
                    .saturating_sub(u64::from(inflight));
                let inputs = UnitInputs {
                    request_tokens: len,
                    new_tokens: (len - f64::from(overlap) * pagef).max(0.0),
                    queued_tokens: queued as f64 * pagef,
                    running: load.requests as f64,
                    active_tokens: load.blocks as f64 * pagef,
                };
                let rates = self.timing.rates(unit);
                let c = cost(&rates, out, &inputs);
                scored.push(Scored {
                    candidate: i,
                    rank,
                    cost: c.total(),
                    ttft: c.ttft,
                    overlap,
                    prefix_secs: rates.prefill_per_token * f64::from(overlap) * pagef,
                    inputs,
                });
            }
        }
        // Balance guard: a unit already this far above the mean request count is no candidate
        // (unless all are), so the busiest unit stays within ~1.3x the mean under load.
        let total: f64 = scored.iter().map(|s| s.inputs.running).sum();
        let cap = BALANCE_FACTOR * (total + 1.0) / scored.len() as f64 + BALANCE_SLACK;
        let keys: Vec<(f64, u32)> = scored
            .iter()
            .map(|s| {
                let over = s.inputs.running + 1.0 > cap;
                (if over { s.cost + OVER_CAP } else { s.cost }, s.overlap)
            })
            .collect();
        let mut rng = rand::rng();
        let mut chosen = scored[pick(&keys, self.settings.temperature, &mut rng)?];
        if let Some(p) = preferred {
            // Sticky key: its worker's best rank keeps the session unless moving saves more
            // time than the prefill the move throws away (see docs/kv-routing.md).
            let own = scored
                .iter()
                .filter(|s| s.candidate == p)
                .min_by(|a, b| a.cost.total_cmp(&b.cost).then(b.overlap.cmp(&a.overlap)))
                .copied();
            match own {
                Some(own) if own.cost <= chosen.cost + own.prefix_secs => {
                    m.sticky.with_label_values(&["kept"]).inc();
                    chosen = own;
                }
                _ => m.sticky.with_label_values(&["yielded"]).inc(),
            }
        }
        let t3 = Instant::now();
        m.stage
            .with_label_values(&["hash"])
            .observe((t1 - t0).as_secs_f64());
        m.stage
            .with_label_values(&["match"])
            .observe((t2 - t1).as_secs_f64());
        m.stage
            .with_label_values(&["score"])
            .observe((t3 - t2).as_secs_f64());
        let worker = &candidates[chosen.candidate];
        if request_blocks > 0 {
            m.request_blocks.observe(f64::from(request_blocks));
            m.overlap_ratio
                .observe(f64::from(chosen.overlap) / f64::from(request_blocks));
        }
        let confirm = self.settings.predict_confirm;
        let mut booking = match self.settings.predict_ttl {
            Some(ttl) if !seqs.is_empty() => {
                // A prediction lasts until its blocks should have been stored: the expected
                // time to first token (with slack) plus the confirmation window.
                let expect = Duration::from_secs_f64((3.0 * chosen.ttft).clamp(0.0, 1e6));
                let ttl = ttl.min(expect + confirm);
                // Only the blocks this request prefills count as in flight; its cached prefix
                // is predicted (for siblings) but is no queued work for other requests.
                let cached = chosen.overlap as usize;
                self.index
                    .book_from_at(worker.id, chosen.rank, &seqs, cached, ttl, Instant::now())
                    .ok()
            }
            _ => None,
        };
        if !input.stream {
            // A non-streaming response's first byte is its end: the in-flight mark would count
            // the whole request as queued prefill. End it now; the prediction (which siblings
            // see as cached) stays, and a failure before the first byte still cancels it.
            if let Some(b) = booking.as_mut() {
                b.prefill_done();
            }
        }
        // SGLang matches the prompt minus its last token, in whole pages.
        let matchable = (tokens.len().saturating_sub(1) / page * page) as u64;
        let predicted = (u64::from(chosen.overlap) * page as u64).min(matchable);
        // A request of unknown length (text) still occupies the unit: count at least a page.
        let load = self
            .loads
            .begin(worker.id, chosen.rank, prompt_key, request_blocks.max(1));
        let probe = TimingProbe {
            model: self.timing.clone(),
            loads: self.loads.clone(),
            unit: Unit::new(worker.id, chosen.rank),
            page: page as u64,
            routed_at: t0,
            stream: input.stream,
            queued_tokens: chosen.inputs.queued_tokens,
            new_tokens: chosen.inputs.new_tokens,
            active_tokens: chosen.inputs.active_tokens + len,
            confirm,
        };
        let attachment = KvAttachment::new(booking, load, predicted, tokens.len() as u64, probe);
        Some(Choice {
            index: chosen.candidate,
            rank: (worker.info.dp_size > 1).then_some(chosen.rank),
            observer: Some(Box::new(attachment)),
        })
    }
}

impl Policy for KvPolicy {
    fn name(&self) -> &'static str {
        "kv"
    }

    fn select(&self, input: &RoutingInput<'_>, candidates: &[Arc<Worker>]) -> Option<Choice> {
        self.choose(input, candidates, None)
    }

    fn select_preferring(
        &self,
        input: &RoutingInput<'_>,
        candidates: &[Arc<Worker>],
        preferred: usize,
    ) -> Option<Choice> {
        self.choose(input, candidates, Some(preferred))
    }

    fn decides_new_keys(&self) -> bool {
        true
    }
}
