//! `KvPolicy`: KV-aware routing over (worker, DP rank) units.
//!
//! Per request: hash the `input_ids` into chained block hashes, `find_matches` in the index,
//! score every candidate unit with the cost model (`cost.rs`) at the unit's learned speed
//! (`rates.rs`) and KV pressure (`pressure.rs`), pick, then book: the unit's load
//! (`load.rs`), a rate probe fed when the response ends, and, with predict-on-route, the
//! blocks in the index (`KvIndex::book`).
//! Blind requests (the index cannot tell the units apart) are placed by `blind.rs` instead of
//! the cost model's random tie-break, so that replicas agree.
//! A text prompt no tokenizer could read is hashed as approximate text pages instead
//! (`routing/input/approx.rs`: matched only against this router's own predictions); requests
//! with neither are scored by load alone. Each decision counts what it hashed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kvrouter_index::{seq_hashes_in, KvIndex, Unit};

use super::attachment::KvAttachment;
use super::blind::{self, BlindSettings, BlindUnit};
use super::cost::{cost, pick, wait, CostWeights, UnitInputs};
use super::hook::{chain, BookingHook, BookingMade};
use super::load::UnitLoads;
use super::metrics::{InputSource, KvMetrics};
use super::pressure::UnitPressure;
use super::rates::{RateProbe, Speed, UnitRates};
use super::siblings::SiblingLocks;
use super::tiers::LowerTiers;
use crate::config::KvConfig;
use crate::routing::input::RoutingInput;
use crate::routing::policy::{Choice, Policy};
use crate::workers::{Rank, Worker};

/// Settings of the KV policy (from `config::KvConfig`).
#[derive(Debug, Clone, Copy)]
pub struct KvPolicySettings {
    /// `evict` is a multiple of the observed reuse (`pressure.rs`), not a cost per block.
    pub weights: CostWeights,
    /// Discount cached prefixes by the blocks expected to be evicted before they are used.
    pub eviction_risk: bool,
    pub temperature: f64,
    /// `None` = `--no-predict`.
    pub predict_ttl: Option<Duration>,
    pub sticky_slack_blocks: f64,
    pub sticky_overload_factor: f64,
    pub blind: BlindSettings,
}

impl KvPolicySettings {
    pub fn from_config(c: &KvConfig) -> Self {
        KvPolicySettings {
            weights: CostWeights {
                prefill: c.prefill_weight,
                decode: c.decode_weight,
                queue: c.queue_weight,
                stall: c.stall_weight,
                evict: c.evict_weight,
            },
            eviction_risk: c.eviction_risk,
            temperature: c.temperature,
            predict_ttl: c.predict.then_some(c.predict_ttl),
            sticky_slack_blocks: c.sticky_slack_blocks,
            sticky_overload_factor: c.sticky_overload_factor,
            blind: c.blind,
        }
    }
}

/// One scored unit.
#[derive(Debug, Clone, Copy)]
struct Scored {
    candidate: usize,
    rank: Rank,
    cost: f64,
    overlap: u32,
}

/// The KV-aware policy (see module docs).
pub struct KvPolicy {
    index: Arc<KvIndex>,
    loads: Arc<UnitLoads>,
    settings: KvPolicySettings,
    hook: Option<Arc<dyn BookingHook>>,
    rates: Option<Arc<UnitRates>>,
    pressure: Option<Arc<UnitPressure>>,
    siblings: SiblingLocks,
    /// Host / disk cache tiers credited in the cost (`tiers.rs`).
    tiers: Option<Arc<LowerTiers>>,
}

impl KvPolicy {
    pub fn new(index: Arc<KvIndex>, loads: Arc<UnitLoads>, settings: KvPolicySettings) -> Self {
        KvPolicy {
            index,
            loads,
            settings,
            hook: None,
            rates: None,
            pressure: None,
            siblings: SiblingLocks::default(),
            tiers: None,
        }
    }

    /// Credits each unit's prefix pages in the lower cache tiers (`tiers.rs`).
    pub fn with_tiers(mut self, tiers: Arc<LowerTiers>) -> Self {
        self.tiers = Some(tiers);
        self
    }

    /// Tells `hook` about every booking this policy takes (`hook.rs`).
    pub fn with_booking_hook(mut self, hook: Arc<dyn BookingHook>) -> Self {
        self.hook = Some(hook);
        self
    }

    /// Scales each unit's cost by its learned speed and feeds `rates` from the responses.
    pub fn with_rates(mut self, rates: Arc<UnitRates>) -> Self {
        self.rates = Some(rates);
        self
    }

    /// Weighs each unit's KV pressure (eviction risk, displaced blocks) and feeds `pressure`
    /// the reuse it observes.
    pub fn with_pressure(mut self, pressure: Arc<UnitPressure>) -> Self {
        self.pressure = Some(pressure);
        self
    }

    /// The index this policy reads and books.
    pub fn index(&self) -> &Arc<KvIndex> {
        &self.index
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
        let (tokens, seqs, source) = match input.token_ids() {
            Some(Ok(t)) => {
                // In the namespace the worker stores them in (`input/namespace.rs`).
                let served = candidates
                    .iter()
                    .find_map(|w| w.info.served_model_name.as_deref());
                let seqs = seq_hashes_in(input.namespace_key(0, served), &t, page);
                let source = if input.ids_from_tokenizer() {
                    InputSource::Tokenizer
                } else {
                    InputSource::Tokens
                };
                (t, seqs, source)
            }
            other => match (&other, input.approx_text_blocks(page)) {
                // No tokenizer: the text's own pages, in their namespace (`input/approx.rs`).
                (None, Some(seqs)) if !seqs.is_empty() => {
                    (Vec::new(), seqs, InputSource::TextApprox)
                }
                _ => {
                    let reason = match &other {
                        Some(Err(_)) => "invalid_token_ids",
                        _ if input.is_batch() => "batch",
                        _ => "no_token_ids",
                    };
                    m.no_tokens.with_label_values(&[reason]).inc();
                    (Vec::new(), Vec::new(), InputSource::None)
                }
            },
        };
        m.input_source[source as usize].inc();
        // Identical prompts (siblings) share a prefill and their KV: tell their load apart.
        let prompt_key = seqs.last().copied();
        // Until this request is booked (end of this function), a sibling waits to score.
        let _serial = self.siblings.hold(prompt_key);
        let t1 = Instant::now();
        let overlaps = self.index.find_matches(&seqs);
        let mut tiers = self.tiers.as_ref().and_then(|t| t.request(&seqs));
        let t2 = Instant::now();
        let request_blocks = overlaps.request_blocks;
        let w = &self.weights();
        let unit_secs = self.rates.as_ref().and_then(|r| r.reference_prefill_secs());
        let mut scored: Vec<Scored> = Vec::with_capacity(candidates.len());
        for (i, worker) in candidates.iter().enumerate() {
            let capacity = worker.info.max_total_num_tokens.map(|t| t / page as u64);
            for rank in worker.ranks() {
                let ov = overlaps.get(Unit::new(worker.id, rank)).copied();
                let load = self.loads.view(worker.id, rank, prompt_key);
                let speed = self.speed(worker, rank);
                let mut inputs = UnitInputs {
                    request_blocks,
                    cached: ov.map_or(0, |o| o.cached()),
                    inflight_depth: ov.map_or(0, |o| o.inflight),
                    unit_inflight_prefill: self.index.inflight_blocks(worker.id, rank),
                    active_blocks: load.other_blocks,
                    active_requests: load.requests,
                    lost: 0,
                    displaced: 0,
                    lower_tier: 0.0,
                };
                if let Some(p) = &self.pressure {
                    let t = p.view(worker.id, rank);
                    if let (true, Some(secs), Some(o)) =
                        (self.settings.eviction_risk, unit_secs, ov)
                    {
                        // Locked: the prefix of a prefill in flight or of siblings in flight;
                        // recently predicted blocks were just touched (head of the LRU order).
                        let safe = if load.siblings > 0 {
                            o.cached()
                        } else {
                            o.inflight.max(o.predicted)
                        };
                        let at_risk = o.cached().saturating_sub(safe);
                        inputs.lost = t.lost(at_risk, wait(w, &inputs, speed) * secs);
                    }
                    inputs.displaced = t.displaced(capacity, inputs.new_prefill());
                }
                if let Some(t) = tiers.as_mut() {
                    inputs.lower_tier = t.credit(Unit::new(worker.id, rank), inputs.usable());
                }
                scored.push(Scored {
                    candidate: i,
                    rank,
                    cost: cost(w, &inputs, speed),
                    overlap: inputs.overlap(),
                });
            }
        }
        let mut chosen = match self.blind_pick(prompt_key, request_blocks, candidates, &scored) {
            Some(i) => scored[i],
            None => {
                let keys: Vec<(f64, u32)> = scored.iter().map(|s| (s.cost, s.overlap)).collect();
                let mut rng = rand::rng();
                scored[pick(&keys, self.settings.temperature, &mut rng)?]
            }
        };
        if let Some(p) = preferred {
            // Sticky key: its worker's best rank wins unless it is overloaded: costlier than
            // `factor * best + slack` (see docs/kv-routing.md).
            let best = scored.iter().map(|s| s.cost).fold(f64::INFINITY, f64::min);
            let own = scored
                .iter()
                .filter(|s| s.candidate == p)
                .min_by(|a, b| a.cost.total_cmp(&b.cost).then(b.overlap.cmp(&a.overlap)))
                .copied();
            match own {
                Some(own)
                    if own.cost
                        <= best * self.settings.sticky_overload_factor
                            + self.settings.sticky_slack_blocks * w.prefill =>
                {
                    m.sticky.with_label_values(&["kept"]).inc();
                    chosen = own;
                }
                _ => m.sticky.with_label_values(&["yielded"]).inc(),
            }
        }
        let t3 = Instant::now();
        let [hash, matching, score] = &m.stages;
        hash.observe((t1 - t0).as_secs_f64());
        matching.observe((t2 - t1).as_secs_f64());
        score.observe((t3 - t2).as_secs_f64());
        let worker = &candidates[chosen.candidate];
        if request_blocks > 0 {
            let found = f64::from(chosen.overlap) / f64::from(request_blocks);
            m.request_blocks.observe(f64::from(request_blocks));
            m.overlap_ratio.observe(found);
            if let Some(p) = &self.pressure {
                p.observe_reuse(found);
            }
        }
        let mut booking = match self.settings.predict_ttl {
            Some(ttl) if !seqs.is_empty() => {
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
        let probe = self.rates.as_ref().map(|r| {
            let idle = self.loads.view(worker.id, chosen.rank, None).requests == 0;
            let unit = r.unit(worker.id, &worker.url, chosen.rank);
            RateProbe::new(unit, self.index.page_size(), input.stream, idle)
        });
        let load = self
            .loads
            .begin(worker.id, chosen.rank, prompt_key, request_blocks);
        let shared = match (&self.hook, &booking, self.settings.predict_ttl) {
            (Some(hook), Some(_), Some(ttl)) => hook.booking_made(&BookingMade {
                worker,
                rank: chosen.rank,
                seqs: &seqs,
                cached: chosen.overlap as usize,
                ttl,
                prefilled: !input.stream,
            }),
            _ => None,
        };
        let hits = (source != InputSource::TextApprox).then_some((predicted, tokens.len() as u64));
        let attachment = KvAttachment::new(booking, load, hits, probe);
        Some(Choice {
            index: chosen.candidate,
            rank: (worker.info.dp_size > 1).then_some(chosen.rank),
            observer: Some(chain(Box::new(attachment), shared)),
        })
    }
}

impl KvPolicy {
    /// This request's weights: `evict` turned into a cost per displaced block (its multiple
    /// of the observed reuse; 0 without pressure).
    fn weights(&self) -> CostWeights {
        let w = self.settings.weights;
        let reuse = self.pressure.as_ref().map_or(0.0, |p| p.reuse());
        CostWeights {
            evict: w.evict * reuse * w.prefill,
            ..w
        }
    }

    fn speed(&self, worker: &Worker, rank: Rank) -> Speed {
        self.rates
            .as_ref()
            .map_or(Speed::UNIT, |r| r.speed(worker.id, rank))
    }

    /// The blind rule's unit (index into `scored`) when the request is blind (`blind.rs`).
    fn blind_pick(
        &self,
        key: Option<u64>,
        request_blocks: u32,
        candidates: &[Arc<Worker>],
        scored: &[Scored],
    ) -> Option<usize> {
        // Without predict-on-route the index never learns of this router's own placements, so
        // every sibling of a burst would be blind and hashed to one unit: keep the cost model
        // (which spreads them by their request slots), as documented for `--no-predict`.
        self.settings.predict_ttl?;
        let key = key?;
        let b = self.settings.blind;
        if b.threshold <= 0.0 {
            return None; // the rule is off (the default): no per-request work
        }
        let units: Vec<BlindUnit<'_>> = scored
            .iter()
            .map(|s| BlindUnit {
                url: &candidates[s.candidate].url,
                rank: s.rank,
                overlap: s.overlap,
                cost: s.cost,
            })
            .collect();
        if !blind::is_blind(b.threshold, request_blocks, &units) {
            return None;
        }
        let placed = blind::place(key, &units, b.balance_factor)?;
        KvMetrics::get().blind[usize::from(placed.spilled)].inc();
        Some(placed.unit)
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
