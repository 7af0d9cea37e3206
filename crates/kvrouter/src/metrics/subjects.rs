//! What the metrics read of the things they record, so `metrics` stays below the modules
//! that own them: a finished request ([`EndedRequest`], implemented by `routing::Booking`),
//! its KV outcome ([`KvOutcome`], filled by the KV policy), and a worker of the compat
//! series ([`SeriesWorker`], implemented by `workers::Worker`).

use http::StatusCode;

/// A KV-routed request's prompt and prefix-hit tokens: predicted at routing, reported by the
/// worker (`cached_tokens`) when its response said so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvOutcome {
    pub prompt_tokens: u64,
    /// Output tokens the worker reported (`completion_tokens`), if it did.
    pub completion_tokens: Option<u64>,
    pub predicted_hit_tokens: u64,
    pub reported_hit_tokens: Option<u64>,
}

/// A request whose relayed response ended (`request_end::relayed`).
pub(crate) trait EndedRequest {
    /// The URL of the worker that answered.
    fn worker_url(&self) -> &str;
    /// The status relayed to the client (`None` before the response head).
    fn status(&self) -> Option<StatusCode>;
    /// What the KV policy expected and the worker reported, in KV mode.
    fn kv_outcome(&self) -> Option<KvOutcome>;
}

/// A worker as the compat series label it (`compat::selection`, `compat::model`).
pub(crate) trait SeriesWorker {
    /// Its canonical URL.
    fn url(&self) -> &str;
    /// The model it serves, once it reported one.
    fn model_id(&self) -> Option<&str>;
}

impl<W: SeriesWorker + ?Sized> SeriesWorker for std::sync::Arc<W> {
    fn url(&self) -> &str {
        (**self).url()
    }

    fn model_id(&self) -> Option<&str> {
        (**self).model_id()
    }
}
