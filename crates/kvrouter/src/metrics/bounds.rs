//! Metrics of the bounds on client-grown state (sticky keys, tracked rids, request bodies in
//! flight, the per-session tokenization cache) and of the disconnect aborts the router chose not to send (docs/router.md, Limits).

use std::sync::OnceLock;

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts};

use super::register;

/// Handles registered once per process.
pub(crate) struct BoundsMetrics {
    /// `kvrouter_sticky_evictions_total`: sticky keys dropped to stay under `sticky_max_keys`.
    pub sticky_evictions: IntCounter,
    /// `kvrouter_rids_untracked_total`: requests whose rids were not tracked (too long, too
    /// many, or the table's byte budget full); their disconnect aborts are never sent.
    pub rids_untracked: IntCounter,
    /// `kvrouter_abort_skipped_total{reason}`: rids whose disconnect or stall abort was not sent.
    pub abort_skipped: IntCounterVec,
    /// `kvrouter_inflight_body_bytes`: request-body bytes read and held (`max_inflight_body_bytes`).
    pub inflight_body_bytes: IntGauge,
    /// `kvrouter_tokenizer_cache_evictions_total`: per-session tokenization cache entries evicted
    /// (least recently used) to stay within `tokenizer_cache_mb`.
    pub tokenizer_cache_evictions: IntCounter,
}

impl BoundsMetrics {
    pub(crate) fn get() -> &'static BoundsMetrics {
        static M: OnceLock<BoundsMetrics> = OnceLock::new();
        M.get_or_init(|| BoundsMetrics {
            sticky_evictions: register(
                IntCounter::new(
                    "kvrouter_sticky_evictions_total",
                    "Sticky routing keys evicted (least recently used) to stay under sticky_max_keys",
                )
                .expect("valid metric"),
            ),
            rids_untracked: register(
                IntCounter::new(
                    "kvrouter_rids_untracked_total",
                    "Requests whose rids were not tracked (too long, too many, or the rid table full)",
                )
                .expect("valid metric"),
            ),
            abort_skipped: register(
                IntCounterVec::new(
                    Opts::new(
                        "kvrouter_abort_skipped_total",
                        "Rids whose disconnect/stall abort the router did not send (it would have \
                         matched another request's rid by prefix, or could not be vouched for)",
                    ),
                    &["reason"],
                )
                .expect("valid metric"),
            ),
            inflight_body_bytes: register(
                IntGauge::new(
                    "kvrouter_inflight_body_bytes",
                    "Request-body bytes read and held by requests in flight",
                )
                .expect("valid metric"),
            ),
            tokenizer_cache_evictions: register(
                IntCounter::new(
                    "kvrouter_tokenizer_cache_evictions_total",
                    "Per-session tokenization cache entries evicted to stay within tokenizer_cache_mb",
                )
                .expect("valid metric"),
            ),
        })
    }
}
