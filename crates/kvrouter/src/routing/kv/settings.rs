//! The KV mode's validated settings: predict-on-route, cost weights, sticky
//! overload rule, blind placements, cache tiers, and the event feed the KV runtime starts.
//! `config::kv` declares the options and builds [`KvConfig`] (`KvConfig::from_options`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{BlindSettings, TierCredits};
use crate::events::runtime::FeedSettings;

/// How much a predicted block counts in the KV cost (`--predict-credit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PredictCredit {
    /// Weighed by what each unit's store events confirmed, TTL learned from their delay
    /// (docs/kv-routing.md "Predictions"). The default: level with `Full` on the trace, GRPO
    /// and agent sessions, shorter rollouts on the mixed workload over capacity
    /// (docs/benchmarks.md, issue 28).
    #[default]
    Learned,
    /// In full for the whole TTL, and never at eviction risk (the default before issue 28).
    Full,
}

/// Validated KV-mode settings (built by `config::kv` from the `[kv]` options).
#[derive(Debug, Clone, PartialEq)]
pub struct KvConfig {
    /// Predict-on-route on (`--no-predict` turns it off).
    pub predict: bool,
    /// The TTL of a prediction (`learned` credit: its upper bound).
    pub predict_ttl: Duration,
    pub predict_credit: PredictCredit,
    pub prefill_weight: f64,
    pub decode_weight: f64,
    pub queue_weight: f64,
    /// `--kv-evict-weight`: multiple of the observed reuse charged per displaced block.
    pub evict_weight: f64,
    /// `--kv-eviction-risk`: discount cached prefixes by the expected evictions.
    pub eviction_risk: bool,
    /// Learned rates scale the cost (`--kv-learn-rates`).
    pub learn_rates: bool,
    pub rate_tolerance: f64,
    pub sticky_slack_blocks: f64,
    pub sticky_overload_factor: f64,
    /// Blind placements (`--kv-blind-threshold`, `--kv-balance-factor`; see `routing::kv::blind`).
    pub blind: BlindSettings,
    /// The event feed: NATS, relay, JetStream, Dynamo (`events::runtime`).
    pub feed: FeedSettings,
    /// Share predictions with the other replicas over NATS (`--share-predictions`, only with
    /// `--nats-url` and predict-on-route; see docs/events.md).
    pub share_predictions: bool,
    /// `--kv-tier-credit`: host / disk tier pages as fractions of a GPU hit.
    pub tier_credit: TierCredits,
}
