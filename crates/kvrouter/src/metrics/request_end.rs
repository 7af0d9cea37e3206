//! What the router records when a data-plane request ends, i.e. when its relayed response
//! body has been fully sent or dropped (the routing booking is released right after), or when
//! the router answered itself: the one structured log line per request at debug level
//! (`--log-level debug`; fields route, worker, status, stream, duration, and in KV mode the
//! prompt, output and prefix-hit tokens predicted at routing and reported by the worker), and
//! the KV-mode token counts of `--metrics-compat smg`.

use super::subjects::{EndedRequest, KvOutcome};

/// The message every per-request line carries (what log searches key on).
pub(crate) const MESSAGE: &str = "request finished";

/// A relayed response ended `secs` after the request arrived; `booking` (released on return)
/// says which worker answered, with which status, and what the KV policy expected.
pub(crate) fn relayed(
    route: &'static str,
    stream: bool,
    secs: f64,
    booking: Option<impl EndedRequest>,
) {
    let Some(b) = booking else { return };
    let kv = b.kv_outcome();
    if let Some(k) = kv {
        crate::metrics::compat::tokens(route, k.prompt_tokens, k.completion_tokens);
    }
    if !tracing::enabled!(target: "kvrouter::request", tracing::Level::DEBUG) {
        return;
    }
    let status = b.status().map(|s| s.as_u16()).unwrap_or(0);
    line(route, b.worker_url(), status, stream, Some(secs), kv);
}

/// The router answered `status` itself (no worker response was relayed).
pub(crate) fn answered_by_router(route: &'static str, stream: bool, status: u16, worker: &str) {
    if tracing::enabled!(target: "kvrouter::request", tracing::Level::DEBUG) {
        line(route, worker, status, stream, None, None);
    }
}

fn line(
    route: &str,
    worker: &str,
    status: u16,
    stream: bool,
    secs: Option<f64>,
    kv: Option<KvOutcome>,
) {
    let duration_ms = secs.map(|s| (s * 1000.0 * 10.0).round() / 10.0);
    let worker = if worker.is_empty() { "-" } else { worker };
    match kv {
        Some(k) => tracing::debug!(
            target: "kvrouter::request",
            route,
            worker,
            status,
            stream,
            duration_ms,
            prompt_tokens = k.prompt_tokens,
            output_tokens = k.completion_tokens,
            predicted_hit_tokens = k.predicted_hit_tokens,
            actual_hit_tokens = k.reported_hit_tokens,
            "{MESSAGE}"
        ),
        None => tracing::debug!(
            target: "kvrouter::request",
            route,
            worker,
            status,
            stream,
            duration_ms,
            "{MESSAGE}"
        ),
    }
}
