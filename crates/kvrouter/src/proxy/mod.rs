//! Upstream forwarding: client pool, byte-exact relay of bodies and SSE streams, retries before the first byte.
//!
//! [`forward`] sends one attempt (original bytes, filtered headers, time-to-first-byte deadline);
//! [`RelayBody`] streams the worker's response back and owns the request's booking;
//! [`retry::run`] repeats attempts (backoff, exhausted, metrics hooks) while nothing reached the
//! client; [`fanout::call`] does the small buffered admin calls; [`Target`] is the one place a
//! worker's credentials are put on a request; [`RequestTelemetry`] is what one data-plane request
//! records (the only place its metrics are called). Choosing workers is not done here.

pub mod abort;
pub mod body_budget;
pub mod client;
pub mod fanout;
pub mod forward;
pub mod headers;
pub mod metrics;
pub mod relay;
pub mod retry;
pub mod rids;
pub mod target;
pub mod telemetry;

pub use client::{build_client, UpstreamClient};
pub use forward::{forward, ForwardError, HeadWait, StallWatch};
pub use relay::{FrameRewrite, RelayBody, RelayContext};
pub use retry::{Retried, RetryPolicy};
pub use target::Target;
pub use telemetry::RequestTelemetry;
