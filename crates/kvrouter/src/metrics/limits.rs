//! `kvrouter_limit_trips_total{limit}`: a request or connection refused or cut by a resource
//! limit (docs/router.md, Limits). Here, below every concern that trips one (the server's
//! connection and body limits, the proxy's stall watch, routing's sticky table).

use std::sync::OnceLock;

use prometheus::{IntCounterVec, Opts};

use super::register;

/// The family, registered on first use.
pub(crate) fn limit_trips() -> &'static IntCounterVec {
    static TRIPS: OnceLock<IntCounterVec> = OnceLock::new();
    TRIPS.get_or_init(|| {
        register(
            IntCounterVec::new(
                Opts::new(
                    "kvrouter_limit_trips_total",
                    "Requests or connections refused or cut by a resource limit (docs/router.md, Limits)",
                ),
                &["limit"],
            )
            .expect("valid metric"),
        )
    })
}

/// Counts one trip of `limit` (a flag name without `--`, e.g. `header_read_timeout`).
pub(crate) fn limit_tripped(limit: &str) {
    limit_trips().with_label_values(&[limit]).inc();
}
