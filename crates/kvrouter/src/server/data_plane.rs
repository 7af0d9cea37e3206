//! The data-plane handler: parse -> admit -> attempts -> relay.
//!
//! [`handle`] reads the body (bounded) and its routing inputs and waits at the refit gate;
//! the retry driver ([`retry::run`]) then repeats `attempt::WorkerAttempts` (pick and book a worker,
//! forward the original bytes), on another worker where there is one, while nothing has
//! been relayed yet and the request timeout allows. The worker's response (status, headers,
//! body) is relayed unchanged.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{header, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use tokio::time::Instant;
use tower_http::timeout::{TimeoutBody, TimeoutError};

use super::answer::{admit, refuse};
use super::attempt::WorkerAttempts;
use super::body::RouterBody;
use super::error::ApiError;
use super::state::AppState;
use crate::proxy::body_budget::{BodyBudget, BodyPermit};
use crate::proxy::metrics::ProxyMetrics;
use crate::proxy::retry;
use crate::proxy::RequestTelemetry;
use crate::routing::{Endpoint, RoutingInput};

/// The largest buffer allocated before the bytes arrive: beyond it the buffer grows with the
/// data (doubling), so a slow upload declaring a large `content-length` holds what it sent.
const PREALLOCATE_MAX: usize = 1 << 20;

/// Reads a request body up to `limit` bytes (413 beyond, checked early from `content-length`),
/// with at most `idle` between two of its frames (408 beyond: tower-http's `TimeoutBody`) and
/// at least `upload_rate::MIN_RATE` per window (408 `body_min_rate`), taking the buffer's
/// allocation from `budget` as it grows (503 `inflight_body_budget` when the
/// bodies in flight would pass `max_inflight_body_bytes`). On any error the partial body is
/// dropped, so hyper closes the connection after the answer. The permit holds the body's
/// bytes in the budget until it drops.
pub(crate) async fn read_body(
    headers: &http::HeaderMap,
    body: Incoming,
    limit: usize,
    idle: Duration,
    budget: &BodyBudget,
) -> Result<(Bytes, BodyPermit), ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(limit));
    }
    // Sized from `content-length` up to 1 MiB (a small body is one allocation, no copy at the
    // end); a larger one grows as its bytes arrive.
    let prealloc = usize::try_from(declared.unwrap_or(0)).unwrap_or(usize::MAX);
    let mut buf = BytesMut::with_capacity(prealloc.min(limit).min(PREALLOCATE_MAX));
    let mut permit = budget.permit();
    if !permit.grow(buf.capacity()) {
        ProxyMetrics::limit_tripped("max_inflight_body_bytes");
        return Err(over_budget(budget));
    }
    let mut rate = super::upload_rate::UploadRate::default();
    let body = Limited::new(TimeoutBody::new(idle, body), limit);
    tokio::pin!(body);
    while let Some(frame) = body.frame().await {
        let f = frame.map_err(|e| read_failed(&*e, limit, idle))?;
        if let Some(d) = f.data_ref() {
            if !rate.on_data(d.len()) {
                return Err(too_slow());
            }
            // The budget holds what the buffer allocates (its growth), not only the
            // bytes: RSS follows capacity.
            let before = buf.capacity();
            buf.extend_from_slice(d);
            let grown = buf.capacity().saturating_sub(before);
            if !permit.grow(grown) {
                ProxyMetrics::limit_tripped("max_inflight_body_bytes");
                return Err(over_budget(budget));
            }
        }
    }
    Ok((buf.freeze(), permit))
}

/// 413 naming `max_payload_size`.
fn too_large(limit: usize) -> ApiError {
    ProxyMetrics::limit_tripped("max_payload_size");
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("request body exceeds max_payload_size ({limit} bytes)"),
    )
}

/// 408 `body_min_rate`: the upload fell under `upload_rate::MIN_RATE`.
fn too_slow() -> ApiError {
    ProxyMetrics::limit_tripped("body_min_rate");
    ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "body_min_rate",
        format!(
            "request body arriving slower than {} bytes/s over {} s",
            super::upload_rate::MIN_RATE,
            super::upload_rate::WINDOW.as_secs()
        ),
    )
}

/// The answer to a body that failed to read: past `limit` (413), idle for `idle` (408), or
/// broken (400).
fn read_failed(
    e: &(dyn std::error::Error + Send + Sync + 'static),
    limit: usize,
    idle: Duration,
) -> ApiError {
    if e.is::<http_body_util::LengthLimitError>() {
        return too_large(limit);
    }
    if e.is::<TimeoutError>() {
        ProxyMetrics::limit_tripped("body_read_timeout");
        return ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_read_timeout",
            format!(
                "no request body data for {} s (body_read_timeout_secs)",
                idle.as_secs_f64()
            ),
        );
    }
    ApiError::bad_request("body_read_failed", format!("cannot read request body: {e}"))
}

/// 503 naming `--max-inflight-body-bytes`.
fn over_budget(budget: &BodyBudget) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "inflight_body_budget",
        format!(
            "request bodies in flight would exceed max_inflight_body_bytes ({} bytes); retry later",
            budget.total()
        ),
    )
}

/// Handles `POST /generate`, `/v1/chat/completions`, `/v1/completions`.
pub(crate) async fn handle(
    state: &AppState,
    endpoint: Endpoint,
    req: Request<Incoming>,
    started: Instant,
) -> Response<RouterBody> {
    let mut telemetry = RequestTelemetry::accepted(endpoint, started);
    let (parts, body) = req.into_parts();
    // `_permit`: the body's bytes stay in the budget until the request is answered.
    let (bytes, _permit) = match read_body(
        &parts.headers,
        body,
        state.config.limits.max_payload_size,
        state.config.limits.body_read_timeout,
        &state.body_budget,
    )
    .await
    {
        Ok(b) => b,
        Err(e) => return refuse(telemetry, e),
    };
    let input = match RoutingInput::parse(endpoint, &bytes) {
        Ok(i) => i,
        Err(e) => return refuse(telemetry, e.into()),
    };
    telemetry.parsed(input.stream);
    if let Some(text) = &state.text {
        crate::routing::input::text::tokenize(&input, &bytes, text, &state.registry).await;
    }
    if let Err(e) = admit(state).await {
        return refuse(telemetry, e);
    }
    // The client headers the workers get (allow-list, hop-by-hop stripped, X-Forwarded-For).
    let headers = crate::proxy::headers::for_worker(
        &parts.headers,
        parts.extensions.get().copied(),
        &state.config.header_policy,
    );
    if let Some(pd) = &state.pd {
        return super::pd_dispatch::handle(
            state, pd, endpoint, &headers, &bytes, &input, telemetry,
        )
        .await;
    }
    let mut attempts = WorkerAttempts::new(state, endpoint, &headers, &bytes, &input, telemetry);
    let policy = state.config.retry.policy(attempts.deadline());
    let mut hooks = attempts.retry_hooks();
    let last = retry::run(&policy, &mut attempts, &mut hooks).await;
    attempts.respond(last.into_inner())
}
