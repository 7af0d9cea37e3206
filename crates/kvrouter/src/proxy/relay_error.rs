//! [`RelayError`]: why a relayed body ended early, which the relay (`relay.rs`) reports and the
//! request telemetry (`telemetry.rs`) counts.

use std::time::Duration;

/// Why a relayed body ended early (the client's connection is then cut, see module docs).
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("the worker connection broke mid-body: {0}")]
    Broken(String),
    #[error("the worker is unhealthy and sent nothing for {0:?}")]
    Stalled(Duration),
}

impl RelayError {
    /// The `kind` label of `kvrouter_upstream_failures_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            RelayError::Broken(_) => "stream_broken",
            RelayError::Stalled(_) => "stalled",
        }
    }
}
