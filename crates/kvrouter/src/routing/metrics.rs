//! Routing metrics: selections by policy and sticky-key table size.

use std::sync::OnceLock;

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts};

use crate::metrics::register;

/// Handles registered once per process.
#[derive(Clone)]
pub(crate) struct RoutingMetrics {
    /// `kvrouter_routing_decisions_total{policy}`.
    pub decisions: IntCounterVec,
    /// `kvrouter_sticky_keys`.
    pub sticky_keys: IntGauge,
    /// `kvrouter_sticky_moves_total`.
    pub sticky_moves: IntCounter,
}

impl RoutingMetrics {
    pub(crate) fn get() -> RoutingMetrics {
        static M: OnceLock<RoutingMetrics> = OnceLock::new();
        M.get_or_init(|| RoutingMetrics {
            decisions: register(
                IntCounterVec::new(
                    Opts::new(
                        "kvrouter_routing_decisions_total",
                        "Workers chosen, by deciding policy (sticky = X-SMG-Routing-Key hit)",
                    ),
                    &["policy"],
                )
                .expect("valid metric"),
            ),
            sticky_keys: register(
                IntGauge::new(
                    "kvrouter_sticky_keys",
                    "Routing keys currently stuck to a worker",
                )
                .expect("valid metric"),
            ),
            sticky_moves: register(
                IntCounter::new(
                    "kvrouter_sticky_moves_total",
                    "Routing keys moved to another worker (their worker died or left)",
                )
                .expect("valid metric"),
            ),
        })
        .clone()
    }
}
