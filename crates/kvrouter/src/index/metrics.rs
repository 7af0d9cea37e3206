//! The index's Prometheus handles (registered once in the shared registry).

use std::sync::OnceLock;

use prometheus::{IntCounter, IntGauge};

use crate::metrics::register;

pub(crate) struct IndexMetrics {
    /// Resident (block, worker rank) entries.
    pub(crate) blocks: IntGauge,
    /// Heap bytes held by the confirmed index.
    pub(crate) bytes: IntGauge,
    /// Stores dropped because their parent was unknown on that worker rank.
    pub(crate) unknown_parent: IntCounter,
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
