//! `KvPolicy`: KV-aware routing over (worker, DP rank) units, as four stages:
//!
//! 1. read (`prompt.rs`, `read.rs`): hash the request into chained block hashes, find its
//!    overlaps in the index, read the rows of the units that can win;
//! 2. score (`score.rs`): each row's cost by the cost model (`cost.rs`);
//! 3. decide (`decide.rs`): the rules in order (blind placement, cheapest, sticky);
//! 4. book (`book.rs`): every side effect (prediction, load, rate probe, board, sharing hook,
//!    metrics).
//!
//! Identical prompts (siblings) hold a striped lock from read to book (`siblings.rs`), so the
//! second one reads the first one's booking. One debug line per decision (`trace.rs`).
//! Design and defaults: docs/kv-routing.md.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use kvrouter_index::{KvIndex, Overlaps};
use tokio::time::Instant;

use super::blind::BlindSettings;
use super::board::UnitBoard;
use super::book::{book, BookParams};
use super::cost::CostWeights;
use super::decide::{decide, DecideParams};
use super::hook::BookingHook;
use super::load::UnitLoads;
use super::metrics::KvMetrics;
use super::pressure::UnitPressure;
use super::prompt::Prompt;
use super::rates::UnitRates;
use super::read::{UnitReader, FULL_SCAN_WORKERS};
use super::score::{score, ScoreParams};
use super::siblings::SiblingLocks;
use super::tiers::LowerTiers;
use super::trace;
use super::{KvConfig, PredictCredit};
use crate::routing::input::RoutingInput;
use crate::routing::policy::{Choice, Policy};
use crate::workers::Worker;

/// Settings of the KV policy (from `settings::KvConfig`).
#[derive(Debug, Clone, Copy)]
pub struct KvPolicySettings {
    /// `evict` is a multiple of the observed reuse (`pressure.rs`), not a cost per block.
    pub weights: CostWeights,
    /// Discount cached prefixes by the blocks expected to be evicted before they are used.
    pub eviction_risk: bool,
    /// `None` = `--no-predict`; with `learned` credit, the TTL's upper bound.
    pub predict_ttl: Option<Duration>,
    pub predict_credit: PredictCredit,
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
                evict: c.evict_weight,
            },
            eviction_risk: c.eviction_risk,
            predict_ttl: c.predict.then_some(c.predict_ttl),
            predict_credit: c.predict_credit,
            sticky_slack_blocks: c.sticky_slack_blocks,
            sticky_overload_factor: c.sticky_overload_factor,
            blind: c.blind,
        }
    }
}

/// The KV-aware policy (see module docs).
pub struct KvPolicy {
    pub(super) reader: Arc<UnitReader>,
    settings: KvPolicySettings,
    hook: Option<Arc<dyn BookingHook>>,
    siblings: SiblingLocks,
    /// Read every unit (the full scan the candidate set replaces; benches compare the two).
    every_unit: bool,
    /// Host / disk cache tiers credited in the cost (`tiers.rs`).
    tiers: Option<Arc<LowerTiers>>,
}

impl KvPolicy {
    pub fn new(index: Arc<KvIndex>, loads: Arc<UnitLoads>, settings: KvPolicySettings) -> Self {
        let reader = UnitReader {
            index,
            loads,
            rates: None,
            pressure: None,
            board: UnitBoard::default(),
            weights: settings.weights,
            weigh_predictions: settings.predict_credit == PredictCredit::Learned,
            sweep: AtomicUsize::new(0),
        };
        KvPolicy {
            reader: Arc::new(reader),
            settings,
            hook: None,
            siblings: SiblingLocks::default(),
            every_unit: false,
            tiers: None,
        }
    }

    /// The reads, while the policy is being built (nothing else holds them yet).
    fn reader_mut(&mut self) -> &mut UnitReader {
        Arc::get_mut(&mut self.reader).expect("KvPolicy is built before its first decision")
    }

    /// Credits each unit's prefix pages in the lower cache tiers (`tiers.rs`).
    pub fn with_tiers(mut self, tiers: Arc<LowerTiers>) -> Self {
        self.tiers = Some(tiers);
        self
    }

    /// Reads every unit of the fleet in every decision (the full scan the candidate set of
    /// `read.rs` replaces), for benches that compare the two side by side.
    pub fn reading_every_unit(mut self) -> Self {
        self.every_unit = true;
        self
    }

    /// Tells `hook` about every booking this policy takes (`hook.rs`).
    pub fn with_booking_hook(mut self, hook: Arc<dyn BookingHook>) -> Self {
        self.hook = Some(hook);
        self
    }

    /// Scales each unit's cost by its learned speed and feeds `rates` from the responses.
    pub fn with_rates(mut self, rates: Arc<UnitRates>) -> Self {
        self.reader_mut().rates = Some(rates);
        self
    }

    /// Weighs each unit's KV pressure (eviction risk, displaced blocks) and feeds `pressure`
    /// the reuse it observes.
    pub fn with_pressure(mut self, pressure: Arc<UnitPressure>) -> Self {
        self.reader_mut().pressure = Some(pressure);
        self
    }

    /// The index this policy reads and books.
    pub fn index(&self) -> &Arc<KvIndex> {
        &self.reader.index
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
        let page = self.reader.index.page_size() as usize;
        let t0 = Instant::now();
        let prompt = Prompt::read(input, candidates, page);
        // Until this request is booked (end of this function), a sibling waits to read.
        let _serial = self.siblings.hold(prompt.key());
        let t1 = Instant::now();
        // Predictions are judged live at the router's clock (tokio's: paused-time tests move it).
        let mut overlaps = self
            .reader
            .index
            .find_matches_at(&prompt.seqs, t1.into_std());
        overlaps.units.sort_unstable_by_key(|o| o.unit);
        let mut tiers = self.tiers.as_ref().and_then(|t| t.request(&prompt.seqs));
        let holders = tiers.as_mut().map(|t| t.holders()).unwrap_or_default();
        let t2 = Instant::now();
        let whole = self.reads_whole_fleet();
        let rows = self.reader.rows(
            candidates,
            &overlaps,
            prompt.key(),
            preferred,
            &holders,
            whole,
        );
        let scored = score(&self.score_params(&overlaps), &rows, tiers.as_mut());
        let rules = self.decide_params(candidates, &prompt, &overlaps, preferred);
        let decision = decide(&rules, &scored)?;
        let t3 = Instant::now();
        let [hash, matching, scoring] = &KvMetrics::get().stages;
        hash.observe((t1 - t0).as_secs_f64());
        matching.observe((t2 - t1).as_secs_f64());
        scoring.observe((t3 - t2).as_secs_f64());
        trace::decision(candidates, &scored, &decision);
        let book_params = BookParams {
            reader: &self.reader,
            input,
            candidates,
            prompt: &prompt,
            predict_ttl: self.settings.predict_ttl,
            predict_credit: self.settings.predict_credit,
            hook: self.hook.as_ref(),
            keep_board: !whole && candidates.len() > FULL_SCAN_WORKERS,
        };
        Some(book(&book_params, &scored, &decision))
    }

    /// The blind rule needs every unit's cost.
    fn reads_whole_fleet(&self) -> bool {
        self.every_unit || self.blind().is_some()
    }

    /// The blind rule's settings when it is on.
    fn blind(&self) -> Option<BlindSettings> {
        // Without predict-on-route the index never learns of this router's own placements, so
        // every sibling of a burst would be blind and hashed to one unit: keep the cost model
        // (which spreads them by their request slots), as documented for `--no-predict`.
        let b = self.settings.blind;
        (self.settings.predict_ttl.is_some() && b.threshold > 0.0).then_some(b)
    }

    pub(super) fn score_params(&self, overlaps: &Overlaps) -> ScoreParams {
        let reuse = self.reader.pressure.as_ref().map_or(0.0, |p| p.reuse());
        ScoreParams {
            weights: ScoreParams::weights(self.settings.weights, reuse),
            request_blocks: overlaps.request_blocks,
            eviction_risk: self.settings.eviction_risk,
            predict_credit: self.settings.predict_credit,
            reference_secs: self
                .reader
                .rates
                .as_ref()
                .and_then(|r| r.reference_prefill_secs()),
        }
    }

    fn decide_params<'a>(
        &self,
        candidates: &'a [Arc<Worker>],
        prompt: &Prompt,
        overlaps: &Overlaps,
        preferred: Option<usize>,
    ) -> DecideParams<'a> {
        DecideParams {
            candidates,
            prompt: prompt.key(),
            request_blocks: overlaps.request_blocks,
            blind: self.blind(),
            preferred,
            sticky_overload_factor: self.settings.sticky_overload_factor,
            sticky_slack: self.settings.sticky_slack_blocks * self.settings.weights.prefill,
        }
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
