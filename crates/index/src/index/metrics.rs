//! The index's Prometheus handles, registered on first use in the index's own registry
//! ([`metrics_registry`]), which the host process gathers with its own: the index crate
//! never depends on the router, and a series appears once an index has touched it.

use std::sync::OnceLock;

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

pub(crate) struct IndexMetrics {
    /// Resident (block, worker rank) entries.
    pub(crate) blocks: IntGauge,
    /// Heap bytes held by the confirmed index.
    pub(crate) bytes: IntGauge,
    /// Stores dropped because their parent was unknown on that worker rank.
    pub(crate) unknown_parent: IntCounter,
    /// Blocks predicted on a unit that did not hold them yet (`calibration.rs`).
    pub(crate) predicted_booked: IntCounter,
    /// Their outcomes: confirmed, removed, expired, cancelled.
    pub(crate) predicted_outcome: [IntCounter; 4],
    /// Seconds from booking to the confirming store event (one sample per event).
    pub(crate) confirm_seconds: Histogram,
}

/// The registry holding the `kvrouter_index_*` series (process-wide, as the handles are):
/// gather it with the host's own registry to render them (the router's `/metrics` does).
pub fn metrics_registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::new)
}

/// Registers a collector in [`metrics_registry`] (each is created once per process).
fn register<C: prometheus::core::Collector + Clone + 'static>(collector: C) -> C {
    // AlreadyReg is the only error a well-formed metric can produce here.
    let _ = metrics_registry().register(Box::new(collector.clone()));
    collector
}

pub(crate) fn metrics() -> &'static IndexMetrics {
    static M: OnceLock<IndexMetrics> = OnceLock::new();
    M.get_or_init(|| IndexMetrics {
        blocks: register(
            IntGauge::new(
                "kvrouter_index_blocks",
                "Resident (block, worker rank) entries in the KV index",
            )
            .expect("valid metric"),
        ),
        bytes: register(
            IntGauge::new("kvrouter_index_bytes", "Heap bytes held by the KV index")
                .expect("valid metric"),
        ),
        unknown_parent: register(
            IntCounter::new(
                "kvrouter_index_unknown_parent_total",
                "BlockStored events dropped because their parent block was unknown",
            )
            .expect("valid metric"),
        ),
        predicted_booked: register(
            IntCounter::new(
                "kvrouter_index_predicted_blocks_total",
                "Blocks predict-on-route booked on a worker rank that did not hold them yet",
            )
            .expect("valid metric"),
        ),
        predicted_outcome: {
            let vec = register(
                IntCounterVec::new(
                    Opts::new(
                        "kvrouter_index_prediction_outcomes_total",
                        "How predicted blocks ended: confirmed by the worker's BlockStored, \
                         removed (voided by its BlockRemoved), expired unconfirmed, cancelled \
                         (the request failed before prefill)",
                    ),
                    &["outcome"],
                )
                .expect("valid metric"),
            );
            ["confirmed", "removed", "expired", "cancelled"].map(|o| vec.with_label_values(&[o]))
        },
        confirm_seconds: register(
            Histogram::with_opts(
                HistogramOpts::new(
                    "kvrouter_index_prediction_confirm_seconds",
                    "Seconds from a prediction's booking to the store event that confirmed it",
                )
                .buckets(vec![
                    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                ]),
            )
            .expect("valid metric"),
        ),
    })
}
