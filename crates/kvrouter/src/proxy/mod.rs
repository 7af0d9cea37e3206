//! Upstream forwarding: client pool, byte-exact relay of bodies and SSE streams, retries before the first byte.
//!
//! [`forward`] sends one attempt (original bytes, filtered headers, time-to-first-byte deadline);
//! [`RelayBody`] streams the worker's response back and owns the request's booking;
//! [`retry::run`] repeats attempts (backoff, exhausted, metrics hooks) while nothing reached the
//! client; [`fanout::call`] does the small buffered admin calls; [`Target`] is the one place a
//! worker's credentials are put on a request; [`RequestTelemetry`] is what one data-plane request
//! records (the only place its metrics are called). Choosing workers is not done here.

pub(crate) mod abort;
pub(crate) mod body_budget;
pub(crate) mod client;
pub(crate) mod fanout;
pub(crate) mod forward;
pub(crate) mod headers;
pub(crate) mod metrics;
pub(crate) mod relay;
mod relay_error;
pub(crate) mod retry;
pub(crate) mod rids;
mod stall_clock;
pub(crate) mod target;
pub(crate) mod telemetry;

pub(crate) use client::UpstreamClient;
pub(crate) use forward::{forward, ForwardError, HeadWait, StallWatch};
pub(crate) use relay::{FrameRewrite, RelayBody, RelayContext};
pub(crate) use telemetry::RequestTelemetry;
