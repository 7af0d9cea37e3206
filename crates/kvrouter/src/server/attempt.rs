//! One data-plane attempt on one worker: pick and book a worker, forward the original bytes
//! (or the DP-rank body), classify what came back for the retry driver, and turn the final
//! attempt into the client's response (relayed body, or an error naming the worker).

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode};
use http_body_util::Either;
use hyper::body::Incoming;

use super::body::RouterBody;
use super::error::ApiError;
use super::state::AppState;
use crate::proxy::abort::abort_isolated;
use crate::proxy::forward::Orphan;
use crate::proxy::headers::{strip_response_headers, ROUTING_KEY, WORKER_HEADER};
use crate::proxy::retry::{is_retryable_status, Attempts};
use crate::proxy::rids::RidGuard;
use crate::proxy::telemetry::{RetryLabel, RetryTelemetry};
use crate::proxy::{
    forward, ForwardError, FrameRewrite, HeadWait, RelayBody, RelayContext, RequestTelemetry,
    StallWatch,
};
use crate::routing::{Booking, Endpoint, RoutingInput};
use crate::workers::{Worker, WorkerId};

use super::answer::{admit, refuse, worker_error};

/// Fires `/abort_request` if the client goes away while the request waits for the worker.
/// When an abort is withheld (another request's rid extends this one's), the request is kept
/// running instead: its late response is read to the end (see [`Orphan`]).
struct AbortIfDropped<'a> {
    state: &'a AppState,
    worker: Option<Arc<Worker>>,
    rids: Option<RidGuard>,
    orphan: &'a Orphan,
}

impl Drop for AbortIfDropped<'_> {
    fn drop(&mut self) {
        if let Some(w) = self.worker.take() {
            if abort_isolated(
                &self.state.tasks,
                &self.state.client,
                &w,
                self.rids.as_ref(),
            ) {
                self.orphan.keep(Box::new(self.rids.clone()));
            }
        }
    }
}

/// How one attempt ended.
pub(super) enum Tried {
    /// The worker answered (any status).
    Answered {
        resp: Response<Incoming>,
        booking: Booking,
    },
    /// No response head came back from `worker`.
    Failed {
        error: ForwardError,
        worker: Arc<Worker>,
    },
    /// No attempt was made (no candidate left, gate refused); `worker`: the last one tried.
    Refused {
        error: ApiError,
        worker: Option<Arc<Worker>>,
    },
}

/// Why an attempt is repeated: the `reason` label of `kvrouter_retries_total`.
pub(super) enum RetryReason {
    Status(StatusCode),
    Connect,
    /// The connection broke after the request may have been sent (worker killed, reset).
    Io,
    /// No response head from a worker the health checker marked unhealthy.
    Stalled,
}

impl RetryLabel for RetryReason {
    fn label(&self) -> &str {
        match self {
            RetryReason::Status(s) => s.as_str(),
            RetryReason::Connect => "connect",
            RetryReason::Io => "io",
            RetryReason::Stalled => "stalled",
        }
    }
}

/// One request's attempts: each picks and books a worker (one not tried yet while there is
/// one, else any routable worker again, as sgl-router re-selects) and forwards to it.
pub(super) struct WorkerAttempts<'a> {
    state: &'a AppState,
    endpoint: Endpoint,
    headers: &'a HeaderMap,
    bytes: &'a Bytes,
    input: &'a RoutingInput<'a>,
    routing_key: Option<&'a str>,
    rids: Vec<String>,
    /// What the request records, handed to the relayed body at the end.
    telemetry: RequestTelemetry,
    /// When the request timeout ends: each attempt waits for its response head until then.
    deadline: tokio::time::Instant,
    tried: Vec<WorkerId>,
    /// Answered when no candidate is left: no workers, or the last connect failure.
    last_error: ApiError,
    last_worker: Option<Arc<Worker>>,
    /// The refit plane's rid -> worker entry, held until the response ends.
    rid_guard: Option<RidGuard>,
}

impl<'a> WorkerAttempts<'a> {
    pub(super) fn new(
        state: &'a AppState,
        endpoint: Endpoint,
        headers: &'a HeaderMap,
        bytes: &'a Bytes,
        input: &'a RoutingInput<'a>,
        telemetry: RequestTelemetry,
    ) -> Self {
        WorkerAttempts {
            state,
            endpoint,
            headers,
            bytes,
            input,
            routing_key: headers
                .get(ROUTING_KEY)
                .and_then(|v| v.to_str().ok())
                .filter(|k| !k.is_empty()),
            rids: input.rids(),
            deadline: telemetry.started() + state.config.upstream.request_timeout,
            telemetry,
            tried: Vec::new(),
            last_error: ApiError::no_workers(),
            last_worker: None,
            rid_guard: None,
        }
    }

    /// The deadline of every attempt (`Instant` of [`RetryPolicy::deadline`]).
    pub(super) fn deadline(&self) -> tokio::time::Instant {
        self.deadline
    }

    /// What the retry driver reports retries to.
    pub(super) fn retry_hooks(&self) -> RetryTelemetry {
        self.telemetry.retries("retrying on another worker")
    }

    /// Books a worker among the routable ones not tried yet, else among all routable ones
    /// (waiting at the gate again if a pause closed it for that worker); `Err` when there is
    /// none.
    async fn book(&mut self) -> Result<Booking, Tried> {
        let state = self.state;
        loop {
            let routable = state.registry.routable();
            let mut pool = candidates(&routable, &self.tried);
            if pool.is_empty() && !self.tried.is_empty() {
                pool = candidates(&routable, &[]);
            }
            let Some(booking) = state.selector.select(self.input, self.routing_key, &pool) else {
                let error = std::mem::replace(&mut self.last_error, ApiError::no_workers());
                let worker = self.last_worker.clone();
                return Err(Tried::Refused { error, worker });
            };
            if state.refit.still_admitted(booking.worker()) {
                return Ok(booking);
            }
            // A pause closed the gate after this request was admitted: wait again.
            drop(booking);
            if let Err(error) = admit(state).await {
                return Err(Tried::Refused {
                    error,
                    worker: None,
                });
            }
        }
    }

    /// Builds the client's response from the last attempt.
    pub(super) fn respond(self, last: Tried) -> Response<RouterBody> {
        match last {
            Tried::Answered { resp, booking, .. } => self.relay(resp, booking),
            Tried::Failed { error, worker, .. } => {
                worker_error(self.telemetry, error.into(), &worker.url)
            }
            Tried::Refused {
                error,
                worker: Some(w),
            } => worker_error(self.telemetry, error, &w.url),
            Tried::Refused {
                error,
                worker: None,
            } => refuse(self.telemetry, error),
        }
    }

    /// Forwards the request to `worker` and waits for the response head; the worker's
    /// `rid`s are aborted if this future is dropped (the client left) or the worker stalled.
    async fn send(
        &self,
        worker: &Arc<Worker>,
        booking: &Booking,
    ) -> Result<Response<Incoming>, ForwardError> {
        let state = self.state;
        let orphan = Orphan::new(&state.tasks);
        let mut guard = AbortIfDropped {
            state,
            worker: Some(worker.clone()),
            rids: self.rid_guard.clone(),
            orphan: &orphan,
        };
        let (headers, body) = upstream_request(self.headers, self.bytes, booking);
        // What is left of the request timeout (the backoff never starts an attempt past it).
        let timeout = self
            .deadline
            .saturating_duration_since(tokio::time::Instant::now());
        let path = self.endpoint.path();
        let unhealthy = || !worker.is_healthy();
        let watch = StallWatch {
            idle: state.config.limits.stream_idle_timeout,
            unhealthy: &unhealthy,
        };
        let result = forward(
            &state.client,
            Method::POST,
            worker.as_ref().into(),
            path,
            &headers,
            body,
            HeadWait {
                first_byte: timeout,
                stall: Some(watch),
                orphan: self.rid_guard.is_some().then_some(&orphan),
            },
        )
        .await;
        if matches!(result, Err(ForwardError::Stalled { .. })) {
            // Abandoned: if the worker comes back, it should not keep generating for nobody.
            self.telemetry.attempt_stalled();
            abort_isolated(&state.tasks, &state.client, worker, self.rid_guard.as_ref());
        }
        guard.worker = None;
        drop(guard);
        result
    }

    /// Notes `worker` as tried and tells its health and the telemetry what it got back.
    fn settle(
        &mut self,
        worker: Arc<Worker>,
        booking: Booking,
        result: Result<Response<Incoming>, ForwardError>,
    ) -> Tried {
        if !self.tried.contains(&worker.id) {
            self.tried.push(worker.id);
        }
        self.last_worker = Some(worker.clone());
        record_upstream(&self.telemetry, &worker, &result);
        match result {
            Ok(resp) => Tried::Answered { resp, booking },
            Err(error) => {
                tracing::warn!(worker = %worker.url, %error, "upstream attempt failed");
                if matches!(error, ForwardError::Connect { .. }) {
                    self.last_error = ApiError::from(&error);
                }
                Tried::Failed { error, worker }
            }
        }
    }

    fn relay(self, resp: Response<Incoming>, booking: Booking) -> Response<RouterBody> {
        let from = RelayFrom {
            state: self.state,
            telemetry: self.telemetry,
            rids: self.rid_guard,
        };
        relay_response(from, resp, booking, None)
    }
}

impl Attempts for WorkerAttempts<'_> {
    type Output = Tried;
    type Reason = RetryReason;

    async fn attempt(&mut self, _n: u32) -> Tried {
        let state = self.state;
        let booking = match self.book().await {
            Ok(b) => b,
            Err(refused) => return refused,
        };
        let worker = booking.worker().clone();
        self.telemetry.routed(state.selector.policy_name(), &worker);
        self.rid_guard = state
            .refit
            .rids
            .track(&self.rids, &worker)
            .or(self.rid_guard.take());
        self.telemetry.sending();
        let result = self.send(&worker, &booking).await;
        self.settle(worker, booking, result)
    }

    /// Retried (sgl-router's rule): a 408/429/500/502/503/504 answer, a connect failure
    /// (nothing was sent), a connection that broke before the response head, or a stall on an
    /// unhealthy worker. A timeout is final: the request timeout is spent.
    fn should_retry(&self, tried: &Tried) -> Option<RetryReason> {
        match tried {
            Tried::Answered { resp, .. } if is_retryable_status(resp.status()) => {
                Some(RetryReason::Status(resp.status()))
            }
            Tried::Failed { error, .. } => match error {
                ForwardError::Connect { .. } => Some(RetryReason::Connect),
                ForwardError::Io { .. } => Some(RetryReason::Io),
                ForwardError::Stalled { .. } => Some(RetryReason::Stalled),
                ForwardError::Timeout { .. } | ForwardError::BadUrl { .. } => None,
            },
            _ => None,
        }
    }
}

/// A response head the circuit breaker counts against the worker: a 5xx, or a 408/429 (the
/// worker is overloaded). Other 4xx are the client's fault and count as successes (see
/// docs/migration.md, "Behaviour differences": sgl-router counts every non-2xx).
fn counts_as_failure(status: StatusCode) -> bool {
    status.is_server_error() || is_retryable_status(status)
}

/// Tells `worker`'s health (circuit breaker and passive health) and the telemetry what one
/// attempt to it got back: a regular attempt or either PD leg.
pub(super) fn record_upstream(
    telemetry: &RequestTelemetry,
    worker: &Worker,
    result: &Result<Response<Incoming>, ForwardError>,
) {
    match result {
        Ok(resp) => {
            let status = resp.status();
            telemetry.upstream_answered(worker, status);
            worker.record_outcome(!counts_as_failure(status));
            if status.is_server_error() {
                worker.record_failure();
            } else {
                worker.record_success();
            }
        }
        Err(error) => {
            worker.record_outcome(false);
            worker.record_failure();
            telemetry.upstream_failed(worker, error);
        }
    }
}

/// The workers of `routable` (the registry's routable list) not tried yet. The first attempt
/// borrows the list: no allocation, and no worker read, whatever the fleet's size.
fn candidates<'s>(routable: &'s [Arc<Worker>], tried: &[WorkerId]) -> Cow<'s, [Arc<Worker>]> {
    if tried.is_empty() {
        Cow::Borrowed(routable)
    } else {
        Cow::Owned(
            routable
                .iter()
                .filter(|w| !tried.contains(&w.id))
                .cloned()
                .collect(),
        )
    }
}

/// The headers and body sent to the booked worker: the original bytes, or the body with the
/// chosen DP rank as `routed_dp_rank` (then with its new `content-length`).
fn upstream_request<'h>(
    headers: &'h HeaderMap,
    bytes: &Bytes,
    booking: &Booking,
) -> (Cow<'h, HeaderMap>, Bytes) {
    match booking.rank_body(bytes) {
        Some(b) => {
            let mut h = headers.clone();
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(b.len()));
            (Cow::Owned(h), b)
        }
        None => (Cow::Borrowed(headers), bytes.clone()),
    }
}

/// What relaying one worker response needs besides the response and its booking.
pub(crate) struct RelayFrom<'a> {
    pub(crate) state: &'a AppState,
    pub(crate) telemetry: RequestTelemetry,
    pub(crate) rids: Option<RidGuard>,
}

/// Relays a worker's response to the client (the regular path and a PD decode): hop headers
/// stripped (and the length when `rewrite` changes the body), the worker named, the head
/// reported to the booking, the body relayed through [`RelayBody`] (rewritten if asked).
pub(crate) fn relay_response(
    from: RelayFrom<'_>,
    resp: Response<Incoming>,
    mut booking: Booking,
    rewrite: Option<Box<dyn FrameRewrite>>,
) -> Response<RouterBody> {
    let (mut parts, body) = resp.into_parts();
    strip_response_headers(&mut parts.headers);
    if rewrite.as_ref().is_some_and(|r| !r.passthrough()) {
        parts.headers.remove(header::CONTENT_LENGTH);
    }
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
    from.telemetry.relaying(parts.status, &url);
    booking.on_response_head(parts.status);
    let ctx = RelayContext {
        telemetry: from.telemetry,
        client: from.state.client.clone(),
        rids: from.rids,
        stream_idle_timeout: from.state.config.limits.stream_idle_timeout,
        tasks: from.state.tasks.clone(),
    };
    let mut body = RelayBody::new(body, booking, sse, ctx);
    if let Some(rw) = rewrite {
        body = body.with_rewrite(rw);
    }
    Response::from_parts(parts, Either::Right(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::WorkerInfo;

    fn fleet(n: u32) -> Vec<Arc<Worker>> {
        (0..n)
            .map(|i| {
                Arc::new(Worker::new(
                    WorkerId(i),
                    &format!("http://127.0.0.1:{}", 30000 + i),
                    WorkerInfo::default(),
                ))
            })
            .collect()
    }

    #[test]
    fn first_attempt_borrows_the_routable_list_and_later_ones_leave_out_tried() {
        let snap = fleet(3);
        let all = candidates(&snap, &[]);
        assert!(matches!(all, Cow::Borrowed(_)));
        assert_eq!(all.len(), 3);

        let rest = candidates(&snap, &[WorkerId(1)]);
        assert!(matches!(rest, Cow::Owned(_)));
        let ids: Vec<WorkerId> = rest.iter().map(|w| w.id).collect();
        assert_eq!(ids, vec![WorkerId(0), WorkerId(2)]);
    }
}
