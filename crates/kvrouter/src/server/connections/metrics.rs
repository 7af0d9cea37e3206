//! Connection metrics: open client connections, connections the server closed to make room or
//! because their first request head came too slowly, and admissions to the probe reserve.

use std::sync::OnceLock;

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts};

use crate::metrics::register;

/// Why the server closed a client connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// At `--max-connections`: had not sent one complete request head.
    EvictedFresh,
    /// At `--max-connections`: idle between requests.
    EvictedIdle,
    /// Its first request head did not arrive within `--request-head-timeout-secs` (extended
    /// by the bytes it sent).
    RequestHeadTimeout,
}

impl Reason {
    fn label(self) -> &'static str {
        match self {
            Reason::EvictedFresh => "evicted_fresh",
            Reason::EvictedIdle => "evicted_idle",
            Reason::RequestHeadTimeout => "request_head_timeout",
        }
    }
}

pub struct ConnMetrics {
    /// `kvrouter_connections_open`.
    pub open: IntGauge,
    /// `kvrouter_connections_closed_total{reason}`.
    closed: IntCounterVec,
    /// `kvrouter_connections_reserve_total`.
    pub reserve_admitted: IntCounter,
}

impl ConnMetrics {
    pub fn get() -> &'static ConnMetrics {
        static M: OnceLock<ConnMetrics> = OnceLock::new();
        M.get_or_init(|| ConnMetrics {
            open: register(
                IntGauge::new(
                    "kvrouter_connections_open",
                    "Client connections open (regular and reserve)",
                )
                .expect("valid metric"),
            ),
            closed: register(
                IntCounterVec::new(
                    Opts::new(
                        "kvrouter_connections_closed_total",
                        "Client connections the server closed: to make room at max_connections \
                         (evicted_fresh, evicted_idle) or for a slow first request head",
                    ),
                    &["reason"],
                )
                .expect("valid metric"),
            ),
            reserve_admitted: register(
                IntCounter::new(
                    "kvrouter_connections_reserve_total",
                    "Connections admitted beyond max_connections for probes and metrics only",
                )
                .expect("valid metric"),
            ),
        })
    }

    /// Counts a connection closed for `reason`.
    pub fn closed(&self, reason: Reason) {
        self.closed.with_label_values(&[reason.label()]).inc();
    }
}
