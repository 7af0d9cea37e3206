//! `RequestObserver`: how a policy follows the request it routed, without the proxy knowing
//! the policy. The policy hands one to its [`Choice`]; the [`Booking`] owns it, tells it what
//! the worker answered, and drops it when the request ends (so `Drop` is its "end" hook).
//!
//! [`Choice`]: super::Choice
//! [`Booking`]: super::Booking

use http::StatusCode;

pub use crate::metrics::subjects::KvOutcome;

/// Per-request policy state that watches the response (e.g. the KV policy's prediction).
pub trait RequestObserver: Send + Sync {
    /// The response head that will be relayed to the client (before any body byte).
    fn on_response_head(&mut self, _status: StatusCode) {}
    /// One relayed body chunk, read only (never altered).
    fn on_data(&mut self, _chunk: &[u8]) {}
    /// What the KV policy expected and the worker reported, for the per-request log line.
    fn kv_outcome(&self) -> Option<KvOutcome> {
        None
    }
}
