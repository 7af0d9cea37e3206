//! The index's Prometheus handles, registered on first use in the index's own registry
//! ([`metrics_registry`]), which the host process gathers with its own: the index crate
//! never depends on the router, and a series appears once an index has touched it.

use std::sync::OnceLock;

use prometheus::{IntCounter, IntGauge, Registry};

pub(crate) struct IndexMetrics {
    /// Resident (block, worker rank) entries.
    pub(crate) blocks: IntGauge,
    /// Heap bytes held by the confirmed index.
    pub(crate) bytes: IntGauge,
    /// Stores dropped because their parent was unknown on that worker rank.
    pub(crate) unknown_parent: IntCounter,
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
    })
}
