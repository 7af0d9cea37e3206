//! KV routing metrics: per-decision timings, predicted vs worker-reported prefix hits,
//! requests routed without token ids, sticky yields, blind placements, and the per-unit
//! rates learned online (`rates.rs`; one series per (worker URL, rank) of the fleet, removed
//! with the worker).

use std::sync::OnceLock;

use prometheus::{
    GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts,
};

use crate::metrics::register;

/// What a KV decision hashed (`kvrouter_routing_input_total{source}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputSource {
    /// Token ids the request carries.
    Tokens,
    /// Token ids the model's tokenizer produced from the text prompt.
    Tokenizer,
    /// Approximate text pages (no tokenizer; `routing/input/approx.rs`).
    TextApprox,
    /// Nothing to hash: routed by load (`kvrouter_kv_no_tokens_total` says why).
    None,
}

impl InputSource {
    pub const ALL: [InputSource; 4] = [
        InputSource::Tokens,
        InputSource::Tokenizer,
        InputSource::TextApprox,
        InputSource::None,
    ];

    pub fn label(self) -> &'static str {
        match self {
            InputSource::Tokens => "tokens",
            InputSource::Tokenizer => "tokenizer",
            InputSource::TextApprox => "text_approx",
            InputSource::None => "none",
        }
    }
}

/// Handles registered once per process.
#[derive(Clone)]
pub struct KvMetrics {
    /// `kvrouter_kv_decision_seconds{stage=hash|match|score}`.
    pub stage: HistogramVec,
    /// The `stage` children `hash`, `match`, `score` (in that order), looked up once: every
    /// KV decision observes all three.
    pub stages: [Histogram; 3],
    /// `kvrouter_kv_request_blocks`: full pages per routed request.
    pub request_blocks: Histogram,
    /// `kvrouter_kv_overlap_ratio`: chosen unit's cached blocks / request blocks.
    pub overlap_ratio: Histogram,
    /// Predicted vs worker-reported prefix hits.
    pub hits: HitMetrics,
    /// `kvrouter_kv_no_tokens_total{reason}`: routed by load (no token ids).
    pub no_tokens: IntCounterVec,
    /// `kvrouter_routing_input_total{source}`: what each KV decision hashed, the handles of
    /// [`InputSource::ALL`] in order.
    pub input_source: [IntCounter; 4],
    /// `kvrouter_kv_sticky_total{result=kept|yielded}`.
    pub sticky: IntCounterVec,
    /// The per-unit rates, speed factors and prediction calibration.
    pub units: UnitMetrics,
    /// `kvrouter_kv_blind_total{result=first|spilled}`: blind placements (`blind.rs`),
    /// the handles of `[first, spilled]`.
    pub blind: [IntCounter; 2],
}

/// Prefix hits the router expected against those the workers reported.
#[derive(Clone)]
pub struct HitMetrics {
    /// `kvrouter_kv_predicted_hit_tokens_total`: cached tokens the router expected.
    pub predicted_hit_tokens: IntCounter,
    /// `kvrouter_kv_actual_hit_tokens_total`: `cached_tokens` the workers reported.
    pub actual_hit_tokens: IntCounter,
    /// `kvrouter_kv_prompt_tokens_total`: prompt tokens of those same responses.
    pub prompt_tokens: IntCounter,
    /// `kvrouter_kv_hit_reports_total{result=reported|missing}`.
    pub hit_reports: IntCounterVec,
}

/// Per-(worker, rank) series learned online (`rates.rs`, the index's calibration).
#[derive(Clone)]
pub struct UnitMetrics {
    /// `kvrouter_kv_unit_prefill_seconds_per_block{worker,rank}` (learned).
    pub prefill_rate: GaugeVec,
    /// `kvrouter_kv_unit_decode_seconds_per_token{worker,rank}` (learned).
    pub decode_rate: GaugeVec,
    /// `kvrouter_kv_unit_speed_factor{worker,rank,kind=prefill|decode}`: what the cost uses.
    pub speed: GaugeVec,
    /// `kvrouter_kv_unit_prediction_confirm_ratio{worker,rank}`: recent share of the unit's
    /// predicted blocks its store events confirmed (what `learned` credit weighs them by).
    pub prediction_ratio: GaugeVec,
    /// `kvrouter_kv_unit_prediction_ttl_seconds{worker,rank}`: the unit's learned TTL.
    pub prediction_ttl: GaugeVec,
    /// `kvrouter_kv_unit_speed_factor_changes_total`: a unit became or stopped being scaled (0
    /// on a homogeneous fleet: the block-count model's decisions throughout).
    pub speed_changes: IntCounter,
}

/// Registers a histogram with `buckets`.
fn histogram(name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
    register(
        Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
            .expect("valid metric"),
    )
}

/// Registers a counter.
fn counter(name: &str, help: &str) -> IntCounter {
    register(IntCounter::new(name, help).expect("valid metric"))
}

/// Registers a counter family with `labels`.
fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric"))
}

/// Registers a gauge family with `labels`.
fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> GaugeVec {
    register(GaugeVec::new(Opts::new(name, help), labels).expect("valid metric"))
}

impl KvMetrics {
    pub fn get() -> &'static KvMetrics {
        static M: OnceLock<KvMetrics> = OnceLock::new();
        M.get_or_init(KvMetrics::register)
    }

    /// Registers every family (decision, hits, then the per-unit series).
    fn register() -> KvMetrics {
        let buckets = vec![
            1e-7, 2.5e-7, 5e-7, 1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3,
        ];
        let stage = register(
            HistogramVec::new(
                HistogramOpts::new(
                    "kvrouter_kv_decision_seconds",
                    "Time per KV routing decision stage (hash, match, score)",
                )
                .buckets(buckets),
                &["stage"],
            )
            .expect("valid metric"),
        );
        let blind = counter_vec(
            "kvrouter_kv_blind_total",
            "Blind requests in KV mode (overlaps too alike to choose) placed by rendezvous hashing: on the prompt's first unit, or spilled past units over the load bound",
            &["result"],
        );
        let input_source = counter_vec(
            "kvrouter_routing_input_total",
            "KV-mode routing decisions by what they hashed: token ids in the request (tokens), ids from the model's tokenizer (tokenizer), text pages without a tokenizer (text_approx), nothing (none: routed by load)",
            &["source"],
        );
        KvMetrics {
            input_source: InputSource::ALL.map(|s| input_source.with_label_values(&[s.label()])),
            stages: ["hash", "match", "score"].map(|s| stage.with_label_values(&[s])),
            stage,
            request_blocks: histogram(
                "kvrouter_kv_request_blocks",
                "Full KV pages per request routed in KV mode",
                prometheus::exponential_buckets(1.0, 2.0, 14).expect("buckets"),
            ),
            overlap_ratio: histogram(
                "kvrouter_kv_overlap_ratio",
                "Cached (confirmed or predicted) fraction of the request on the chosen unit",
                vec![0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0],
            ),
            hits: HitMetrics::register(),
            no_tokens: counter_vec(
                "kvrouter_kv_no_tokens_total",
                "Requests routed by load in KV mode because they carry no token ids",
                &["reason"],
            ),
            sticky: counter_vec(
                "kvrouter_kv_sticky_total",
                "Sticky-key requests in KV mode: kept on their worker, or yielded to the cost model",
                &["result"],
            ),
            units: UnitMetrics::register(),
            blind: ["first", "spilled"].map(|r| blind.with_label_values(&[r])),
        }
    }
}

impl HitMetrics {
    fn register() -> HitMetrics {
        HitMetrics {
            predicted_hit_tokens: counter(
                "kvrouter_kv_predicted_hit_tokens_total",
                "Prefix-hit tokens the router expected on the chosen unit (responses that reported cached_tokens)",
            ),
            actual_hit_tokens: counter(
                "kvrouter_kv_actual_hit_tokens_total",
                "Prefix-hit tokens the workers reported (cached_tokens) for the same responses",
            ),
            prompt_tokens: counter(
                "kvrouter_kv_prompt_tokens_total",
                "Prompt tokens of the responses counted in the hit counters",
            ),
            hit_reports: counter_vec(
                "kvrouter_kv_hit_reports_total",
                "KV-routed responses with (reported) or without (missing) cached_tokens",
                &["result"],
            ),
        }
    }
}

impl UnitMetrics {
    fn register() -> UnitMetrics {
        UnitMetrics {
            prefill_rate: gauge_vec(
                "kvrouter_kv_unit_prefill_seconds_per_block",
                "Learned prefill seconds per uncached block of each (worker, rank)",
                &["worker", "rank"],
            ),
            decode_rate: gauge_vec(
                "kvrouter_kv_unit_decode_seconds_per_token",
                "Learned decode seconds per output token of each (worker, rank)",
                &["worker", "rank"],
            ),
            speed: gauge_vec(
                "kvrouter_kv_unit_speed_factor",
                "Factor the KV cost scales a unit's prefill / decode terms by (1 = the fleet's reference)",
                &["worker", "rank", "kind"],
            ),
            prediction_ratio: gauge_vec(
                "kvrouter_kv_unit_prediction_confirm_ratio",
                "Recent share of a unit's predicted blocks that its own BlockStored events confirmed",
                &["worker", "rank"],
            ),
            prediction_ttl: gauge_vec(
                "kvrouter_kv_unit_prediction_ttl_seconds",
                "TTL learned from a unit's confirmation delays (mean + 3 deviations), before the --predict-ttl-secs cap",
                &["worker", "rank"],
            ),
            speed_changes: counter(
                "kvrouter_kv_unit_speed_factor_changes_total",
                "Times a unit's prefill or decode speed factor went from 1 to scaled or back",
            ),
        }
    }
}

/// `kvrouter_kv_tier_blocks{tier=gpu|host|disk}`: resident (block, unit) entries per cache
/// tier (`tiers.rs`; `gpu` equals `kvrouter_index_blocks`). Refreshed by the KV runtime's timer.
pub fn set_tier_blocks(gpu: &kvrouter_index::KvIndex, tiers: &super::tiers::LowerTiers) {
    use kvrouter_index::Tier;
    static G: OnceLock<prometheus::IntGaugeVec> = OnceLock::new();
    let g = G.get_or_init(|| {
        register(
            prometheus::IntGaugeVec::new(
                Opts::new(
                    "kvrouter_kv_tier_blocks",
                    "Resident (block, worker rank) entries per KV cache tier (gpu, host, disk)",
                ),
                &["tier"],
            )
            .expect("valid metric"),
        )
    });
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    g.with_label_values(&["gpu"])
        .set(count(gpu.resident_blocks()));
    for (tier, label) in [(Tier::Host, "host"), (Tier::Disk, "disk")] {
        g.with_label_values(&[label])
            .set(count(tiers.resident_blocks(tier)));
    }
}

/// Sets the per-unit prediction gauges of every unit of `registry`'s workers from `index`
/// (the KV timer calls it); `shown` carries the labels set last time, so a unit that left
/// loses its series.
pub fn set_prediction_gauges(
    index: &kvrouter_index::KvIndex,
    registry: &crate::workers::Registry,
    shown: &mut std::collections::HashSet<(String, String)>,
) {
    let m = KvMetrics::get();
    let now = tokio::time::Instant::now().into_std();
    let mut seen = std::collections::HashSet::new();
    for w in registry.snapshot().iter() {
        for rank in w.ranks() {
            let c = index.prediction_calibration(w.id, rank, now);
            if c.booked == 0 {
                continue;
            }
            let rank = rank.to_string();
            let labels = [w.url.as_str(), rank.as_str()];
            m.units
                .prediction_ratio
                .with_label_values(&labels)
                .set(c.confirm_ratio);
            if let Some(ttl) = c.learned_ttl {
                m.units
                    .prediction_ttl
                    .with_label_values(&labels)
                    .set(ttl.as_secs_f64());
            }
            seen.insert((w.url.clone(), rank));
        }
    }
    for (url, rank) in shown.difference(&seen) {
        let _ = m.units.prediction_ratio.remove_label_values(&[url, rank]);
        let _ = m.units.prediction_ttl.remove_label_values(&[url, rank]);
    }
    *shown = seen;
}
