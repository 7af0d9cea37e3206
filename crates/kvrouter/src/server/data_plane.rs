//! The data-plane handler: read the body (bounded), parse routing inputs, pick and book a
//! worker, forward the original bytes, and retry on another worker while nothing has come
//! back yet. The worker's response (status, headers, body) is relayed unchanged.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Limited};
use hyper::body::Incoming;

use super::body::RouterBody;
use super::error::ApiError;
use super::state::AppState;
use crate::proxy::abort::abort_upstream;
use crate::proxy::headers::{strip_response_headers, ROUTING_KEY, WORKER_HEADER};
use crate::proxy::metrics::ProxyMetrics;
use crate::proxy::retry::is_retryable_status;
use crate::proxy::{forward, ForwardError, RelayBody, RelayContext};
use crate::routing::{Booking, Endpoint, InputError, RoutingInput};
use crate::workers::{Worker, WorkerId};

/// Reads a request body up to `limit` bytes (413 beyond, checked early from `content-length`).
pub async fn read_body(
    headers: &http::HeaderMap,
    body: Incoming,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request body exceeds max_payload_size ({limit} bytes)"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    match Limited::new(body, limit).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(e) => Err(ApiError::bad_request(
            "body_read_failed",
            format!("cannot read request body: {e}"),
        )),
    }
}

/// Fires `/abort_request` if the client goes away while the request waits for the worker.
struct AbortIfDropped<'a> {
    state: &'a AppState,
    worker: Option<Arc<Worker>>,
    rids: &'a [String],
}

impl Drop for AbortIfDropped<'_> {
    fn drop(&mut self) {
        if let Some(w) = self.worker.take() {
            if !self.rids.is_empty() {
                abort_upstream(&self.state.client, &w.url, self.rids.to_vec());
            }
        }
    }
}

fn record(route: &'static str, status: StatusCode, worker: &str) {
    ProxyMetrics::get()
        .requests
        .with_label_values(&[route, status.as_str(), worker])
        .inc();
}

fn error(route: &'static str, e: ApiError) -> Response<RouterBody> {
    record(route, e.status, "");
    e.into_response()
}

/// A router-made error after trying `worker`: still names the worker in `x-kvrouter-worker`.
fn worker_error(route: &'static str, e: ApiError, worker: &str) -> Response<RouterBody> {
    record(route, e.status, worker);
    let mut resp = e.into_response();
    if let Ok(v) = HeaderValue::from_str(worker) {
        resp.headers_mut().insert(WORKER_HEADER, v);
    }
    resp
}

/// Handles `POST /generate`, `/v1/chat/completions`, `/v1/completions`.
pub async fn handle(
    state: &AppState,
    endpoint: Endpoint,
    req: Request<Incoming>,
    started: Instant,
) -> Response<RouterBody> {
    let route = endpoint.label();
    let (parts, body) = req.into_parts();
    let bytes = match read_body(&parts.headers, body, state.config.max_payload_size).await {
        Ok(b) => b,
        Err(e) => return error(route, e),
    };
    let input = match RoutingInput::parse(endpoint, &bytes) {
        Ok(i) => i,
        Err(e) => {
            let code = match e {
                InputError::Malformed(_) => "invalid_json",
                InputError::MissingPrompt(_) => "missing_prompt",
                InputError::BadField { .. } => "invalid_field",
            };
            return error(route, ApiError::bad_request(code, e.to_string()));
        }
    };
    let rids = input.rids();
    let stream = input.stream;
    let routing_key = parts
        .headers
        .get(ROUTING_KEY)
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty());
    let metrics = ProxyMetrics::get();
    let max_retries = state.config.retry_max_retries;
    let mut tried: Vec<WorkerId> = Vec::new();
    let mut last_error = ApiError::no_workers();
    let mut last_worker: Option<Arc<Worker>> = None;
    let mut attempt = 0u32;
    if let Err(e) = admit(state).await {
        return error(route, e);
    }
    let mut rid_guard = None;
    loop {
        let snapshot = state.registry.snapshot();
        let candidates: Vec<Arc<Worker>> = snapshot
            .iter()
            .filter(|w| w.is_routable() && !tried.contains(&w.id))
            .cloned()
            .collect();
        let Some(booking) = state.selector.select(&input, routing_key, &candidates) else {
            return match &last_worker {
                Some(w) => worker_error(route, last_error, &w.url),
                None => error(route, last_error),
            };
        };
        if !state.refit.still_admitted(booking.worker()) {
            // A pause closed the gate after this request was admitted: wait again.
            drop(booking);
            if let Err(e) = admit(state).await {
                return error(route, e);
            }
            continue;
        }
        let can_retry = attempt < max_retries && candidates.len() > 1;
        let worker = booking.worker().clone();
        rid_guard = state.refit.rids.track(&rids, &worker).or(rid_guard);
        if attempt == 0 {
            metrics
                .overhead
                .with_label_values(&[route])
                .observe(started.elapsed().as_secs_f64());
        }
        let mut guard = AbortIfDropped {
            state,
            worker: Some(worker.clone()),
            rids: &rids,
        };
        // KV mode, dp_size > 1: the chosen rank travels as `routed_dp_rank` (docs/kv-routing.md).
        let injected = match booking.rank() {
            Some(rank) if worker.info.dp_size > 1 => {
                crate::routing::kv::dp::with_routed_rank(&bytes, rank)
            }
            _ => None,
        };
        let (headers, body) = match injected {
            Some(b) => {
                let mut h = parts.headers.clone();
                h.insert(header::CONTENT_LENGTH, HeaderValue::from(b.len()));
                (std::borrow::Cow::Owned(h), b)
            }
            None => (std::borrow::Cow::Borrowed(&parts.headers), bytes.clone()),
        };
        let result = forward(
            &state.client,
            Method::POST,
            &worker.url,
            endpoint.path(),
            &headers,
            body,
            state.config.request_timeout,
        )
        .await;
        guard.worker = None;
        drop(guard);
        match result {
            Ok(resp) => {
                let status = resp.status();
                if status.is_server_error() {
                    worker.record_failure();
                    metrics
                        .upstream_failures
                        .with_label_values(&[worker.url.as_str(), status.as_str()])
                        .inc();
                } else {
                    worker.record_success();
                }
                if is_retryable_status(status) && can_retry {
                    tracing::debug!(worker = %worker.url, %status, "retrying on another worker");
                    metrics
                        .retries
                        .with_label_values(&[route, status.as_str()])
                        .inc();
                } else {
                    let hold =
                        rid_guard.map(|g| Box::new(g) as Box<dyn std::any::Any + Send + Sync>);
                    return relay(state, route, resp, booking, stream, started, rids, hold);
                }
            }
            Err(e) => {
                worker.record_failure();
                let kind = match &e {
                    ForwardError::Connect { .. } => "connect",
                    ForwardError::Timeout { .. } => "timeout",
                    ForwardError::Io { .. } => "io",
                    ForwardError::BadUrl { .. } => "bad_url",
                };
                metrics
                    .upstream_failures
                    .with_label_values(&[worker.url.as_str(), kind])
                    .inc();
                tracing::warn!(worker = %worker.url, error = %e, "upstream attempt failed");
                match e {
                    ForwardError::Connect { .. } => {
                        last_error = ApiError::new(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "upstream_unavailable",
                            e.to_string(),
                        );
                        if !can_retry {
                            return worker_error(route, last_error, &worker.url);
                        }
                        metrics.retries.with_label_values(&[route, "connect"]).inc();
                    }
                    ForwardError::Timeout { .. } => {
                        return worker_error(
                            route,
                            ApiError::new(
                                StatusCode::GATEWAY_TIMEOUT,
                                "upstream_timeout",
                                e.to_string(),
                            ),
                            &worker.url,
                        )
                    }
                    ForwardError::Io { .. } | ForwardError::BadUrl { .. } => {
                        return worker_error(
                            route,
                            ApiError::new(
                                StatusCode::BAD_GATEWAY,
                                "upstream_request_failed",
                                e.to_string(),
                            ),
                            &worker.url,
                        )
                    }
                }
            }
        }
        drop(booking);
        tried.push(worker.id);
        last_worker = Some(worker);
        tokio::time::sleep(state.backoff.delay(attempt)).await;
        attempt += 1;
    }
}

/// Waits at the refit gate (at once when open); 503 when refused, full or held too long.
async fn admit(state: &AppState) -> Result<(), ApiError> {
    state
        .refit
        .gate
        .admit(state.refit.config.max_hold)
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "generation_paused",
                e.to_string(),
            )
        })
}

#[allow(clippy::too_many_arguments)]
fn relay(
    state: &AppState,
    route: &'static str,
    resp: Response<Incoming>,
    mut booking: Booking,
    stream: bool,
    started: Instant,
    rids: Vec<String>,
    hold: Option<Box<dyn std::any::Any + Send + Sync>>,
) -> Response<RouterBody> {
    let (mut parts, body) = resp.into_parts();
    strip_response_headers(&mut parts.headers);
    let url = booking.worker().url.clone();
    if let Ok(v) = HeaderValue::from_str(&url) {
        parts.headers.insert(WORKER_HEADER, v);
    }
    let sse = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
        // A final error event can only be appended to a stream without a declared length.
        && !parts.headers.contains_key(header::CONTENT_LENGTH);
    record(route, parts.status, &url);
    if !parts.status.is_success() {
        // Nothing was prefilled: drop the KV prediction now.
        if let Some(kv) = booking.attachment_mut::<crate::routing::kv::KvAttachment>() {
            kv.cancel_prediction();
        }
    }
    let ctx = RelayContext {
        route,
        stream,
        started,
        client: state.client.clone(),
        rids,
        hold,
    };
    Response::from_parts(
        parts,
        Either::Right(RelayBody::new(body, booking, sse, ctx)),
    )
}
