//! Refit-plane metrics: control calls by path and outcome, their duration, and the gate.

use std::sync::OnceLock;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts};

use crate::metrics::register;

/// Handles registered once per process.
#[derive(Clone)]
pub(super) struct RefitMetrics {
    /// `kvrouter_refit_calls_total{path,outcome}` (outcome: ok | failed), per worker call.
    pub calls: IntCounterVec,
    /// `kvrouter_refit_call_seconds{path}`: one control call over all its workers.
    pub duration: HistogramVec,
    /// `kvrouter_refit_gate_closed`: 1 while a fleet-wide pause holds requests.
    pub gate_closed: IntGauge,
    /// `kvrouter_refit_cache_clears_total{reason}`: workers whose KV index entries were dropped.
    pub cache_clears: IntCounterVec,
}

impl RefitMetrics {
    pub(super) fn get() -> &'static RefitMetrics {
        static M: OnceLock<RefitMetrics> = OnceLock::new();
        M.get_or_init(|| RefitMetrics {
            calls: register(
                IntCounterVec::new(
                    Opts::new(
                        "kvrouter_refit_calls_total",
                        "Refit control calls per worker",
                    ),
                    &["path", "outcome"],
                )
                .expect("valid metric"),
            ),
            duration: register(
                HistogramVec::new(
                    HistogramOpts::new(
                        "kvrouter_refit_call_seconds",
                        "Duration of one refit control call over all its workers",
                    )
                    .buckets(vec![
                        0.001, 0.005, 0.02, 0.1, 0.5, 2.0, 10.0, 60.0, 300.0, 1800.0,
                    ]),
                    &["path"],
                )
                .expect("valid metric"),
            ),
            gate_closed: register(
                IntGauge::new(
                    "kvrouter_refit_gate_closed",
                    "1 while a fleet-wide pause holds new requests",
                )
                .expect("valid metric"),
            ),
            cache_clears: register(
                IntCounterVec::new(
                    Opts::new(
                        "kvrouter_refit_cache_clears_total",
                        "Workers whose KV cache a control call emptied",
                    ),
                    &["reason"],
                )
                .expect("valid metric"),
            ),
        })
    }
}
