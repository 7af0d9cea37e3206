//! Dual-leg dispatch: one attempt books a (prefill, decode) pair, draws new bootstrap rooms,
//! sends both legs at once and waits for their response heads. A transport error or an error
//! head on one leg cancels the other (its connection is dropped and its `rid`s aborted), so
//! no worker waits for a bootstrap peer that will never come; the retry driver then tries a
//! new pair with new rooms while nothing reached the client. The client gets the decode
//! response (merged with the prefill's input logprobs when asked, see `merge`); the prefill
//! response is drained beside it and checked. A client that goes away aborts both legs.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;

use super::attempt::record_upstream;
use super::pd_merge::{self as merge, Passthrough, PrefillLeg, SseMerge};
use crate::pd::pair::{Missing, Pair};
use crate::pd::splice::{self, BodyFacts, Bootstrap};
use crate::pd::PdRouter;
use crate::proxy::abort::abort_isolated;
use crate::proxy::headers::{strip_response_headers, ROUTING_KEY, WORKER_HEADER};
use crate::proxy::retry::{self, is_retryable_status, Attempts};
use crate::proxy::rids::RidGuard;
use crate::proxy::telemetry::RetryLabel;
use crate::proxy::{forward, ForwardError, FrameRewrite, HeadWait, RequestTelemetry, StallWatch};
use crate::routing::{Booking, Endpoint, RoutingInput};
use crate::server::answer::{admit, refuse, worker_error};
use crate::server::body::RouterBody;
use crate::server::error::ApiError;
use crate::server::state::AppState;
use crate::server::{relay_response, RelayFrom};
use crate::workers::{Worker, WorkerId};

/// Which leg.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leg {
    Prefill,
    Decode,
}

impl Leg {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Leg::Prefill => "prefill",
            Leg::Decode => "decode",
        }
    }
}

/// How one PD attempt ended.
pub(crate) enum PdTried {
    /// Both legs answered a success head.
    Answered {
        prefill: Response<Incoming>,
        decode: Response<Incoming>,
        pair: Pair,
    },
    /// One leg answered an error head (the other was cancelled).
    LegStatus {
        leg: Leg,
        resp: Response<Incoming>,
        booking: Booking,
    },
    /// One leg gave no response head (the other was cancelled).
    LegFailed {
        leg: Leg,
        error: ForwardError,
        worker: Arc<Worker>,
    },
    /// No attempt was made.
    Refused { error: ApiError },
}

/// Why an attempt is repeated (the `reason` label of `kvrouter_retries_total`).
pub(crate) struct PdRetry(&'static str);

impl RetryLabel for PdRetry {
    fn label(&self) -> &str {
        self.0
    }
}

/// Aborts a leg's `rid`s if dropped armed (the client left, or the other leg failed).
struct LegAbort<'a> {
    state: &'a AppState,
    worker: Arc<Worker>,
    rids: Option<RidGuard>,
    armed: bool,
}

impl<'a> LegAbort<'a> {
    /// An abort of `worker`'s leg that fires unless disarmed.
    fn armed(state: &'a AppState, worker: &Arc<Worker>, rids: &Option<RidGuard>) -> Self {
        LegAbort {
            state,
            worker: worker.clone(),
            rids: rids.clone(),
            armed: true,
        }
    }
}

impl Drop for LegAbort<'_> {
    fn drop(&mut self) {
        if self.armed {
            abort_isolated(
                &self.state.tasks,
                &self.state.client,
                &self.worker,
                self.rids.as_ref(),
            );
        }
    }
}

/// One PD request's attempts.
struct PdAttempts<'a> {
    state: &'a AppState,
    pd: &'a PdRouter,
    endpoint: Endpoint,
    headers: &'a HeaderMap,
    bytes: &'a Bytes,
    input: &'a RoutingInput<'a>,
    facts: BodyFacts,
    routing_key: Option<&'a str>,
    rids: Vec<String>,
    /// What the request records, handed to the relayed decode body at the end.
    telemetry: RequestTelemetry,
    deadline: tokio::time::Instant,
    tried_prefill: Vec<WorkerId>,
    tried_decode: Vec<WorkerId>,
    rid_guard: Option<RidGuard>,
}

/// Handles a data-plane request in PD mode (after admission).
pub(crate) async fn handle(
    state: &AppState,
    pd: &PdRouter,
    endpoint: Endpoint,
    headers: &HeaderMap,
    bytes: &Bytes,
    input: &RoutingInput<'_>,
    telemetry: RequestTelemetry,
) -> Response<RouterBody> {
    let mut attempts = PdAttempts {
        state,
        pd,
        endpoint,
        headers,
        bytes,
        input,
        facts: BodyFacts::read(input, bytes),
        routing_key: headers
            .get(ROUTING_KEY)
            .and_then(|v| v.to_str().ok())
            .filter(|k| !k.is_empty()),
        rids: input.rids(),
        deadline: telemetry.started() + state.config.upstream.request_timeout,
        telemetry,
        tried_prefill: Vec::new(),
        tried_decode: Vec::new(),
        rid_guard: None,
    };
    let policy = state.config.retry.policy(attempts.deadline);
    let mut hooks = attempts.telemetry.retries("retrying on a new PD pair");
    let last = retry::run(&policy, &mut attempts, &mut hooks).await;
    attempts.respond(last.into_inner()).await
}

/// Tells `worker`'s health and the telemetry what its leg got back (as a regular attempt).
fn record_leg(
    telemetry: &RequestTelemetry,
    worker: &Worker,
    result: &Result<Response<Incoming>, ForwardError>,
) {
    record_upstream(telemetry, worker, result);
    if let Err(error) = result {
        tracing::warn!(worker = %worker.url, %error, "PD leg failed");
    }
}

/// One leg's response head, or why there is none.
type LegResult = Result<Response<Incoming>, ForwardError>;

/// What the two legs' response heads came to.
enum Heads {
    /// A leg gave no response head.
    Failed(Leg, ForwardError),
    /// A leg answered an error head.
    Status(Leg, Response<Incoming>),
    /// Both legs answered a success head.
    Both {
        prefill: Response<Incoming>,
        decode: Response<Incoming>,
    },
}

/// How long a leg waits for its head: up to `first_byte`, or until its worker turns
/// unhealthy while nothing came for `idle`.
fn head_wait<'a>(
    first_byte: Duration,
    idle: Duration,
    unhealthy: &'a (dyn Fn() -> bool + Sync),
) -> HeadWait<'a> {
    HeadWait {
        first_byte,
        stall: Some(StallWatch { idle, unhealthy }),
        orphan: None,
    }
}

/// Waits for the legs' heads, recording each on its worker as it comes in; a failed or
/// error head on the first leg in settles at once, without waiting for the other.
async fn heads<P, D>(
    telemetry: &RequestTelemetry,
    pw: &Worker,
    dw: &Worker,
    mut pf: Pin<&mut P>,
    mut df: Pin<&mut D>,
) -> Heads
where
    P: Future<Output = LegResult>,
    D: Future<Output = LegResult>,
{
    let prefill_first = tokio::select! {
        r = &mut pf => Ok(r),
        r = &mut df => Err(r),
    };
    let (prefill, decode) = match prefill_first {
        Ok(p) => {
            record_leg(telemetry, pw, &p);
            match p {
                Err(error) => return Heads::Failed(Leg::Prefill, error),
                Ok(resp) if !resp.status().is_success() => {
                    return Heads::Status(Leg::Prefill, resp)
                }
                Ok(p) => {
                    let d = df.await;
                    record_leg(telemetry, dw, &d);
                    (Ok(p), d)
                }
            }
        }
        Err(d) => {
            record_leg(telemetry, dw, &d);
            match d {
                Err(error) => return Heads::Failed(Leg::Decode, error),
                Ok(resp) if !resp.status().is_success() => return Heads::Status(Leg::Decode, resp),
                Ok(d) => {
                    let p = pf.await;
                    record_leg(telemetry, pw, &p);
                    (p, Ok(d))
                }
            }
        }
    };
    match (prefill, decode) {
        (Err(error), _) => Heads::Failed(Leg::Prefill, error),
        (_, Err(error)) => Heads::Failed(Leg::Decode, error),
        (Ok(p), Ok(_)) if !p.status().is_success() => Heads::Status(Leg::Prefill, p),
        (Ok(_), Ok(d)) if !d.status().is_success() => Heads::Status(Leg::Decode, d),
        (Ok(prefill), Ok(decode)) => Heads::Both { prefill, decode },
    }
}

fn with_length(headers: &HeaderMap, len: usize) -> HeaderMap {
    let mut h = headers.clone();
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    h
}

impl PdAttempts<'_> {
    /// Books a pair (waiting at the refit gate again if a pause closed it for either).
    async fn book(&mut self) -> Result<Pair, PdTried> {
        let state = self.state;
        loop {
            let routable = state.registry.routable();
            let pair = self
                .pd
                .pairs
                .book(
                    &state.selector,
                    &routable,
                    self.input,
                    self.routing_key,
                    &self.tried_prefill,
                    &self.tried_decode,
                )
                .map_err(|missing| {
                    let leg = match missing {
                        Missing::Prefill => "prefill",
                        Missing::Decode => "decode",
                    };
                    PdTried::Refused {
                        error: ApiError::new(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "no_available_workers",
                            format!("no healthy {leg} worker available"),
                        ),
                    }
                })?;
            if state.refit.still_admitted(pair.prefill.worker())
                && state.refit.still_admitted(pair.decode.worker())
            {
                return Ok(pair);
            }
            drop(pair);
            if let Err(error) = admit(state).await {
                return Err(PdTried::Refused { error });
            }
        }
    }

    /// The two legs' bodies: the client's bytes plus the bootstrap fields (and DP ranks).
    fn bodies(&self, pair: &Pair) -> Option<(Bytes, Bytes)> {
        let pw = pair.prefill.worker();
        let dw = pair.decode.worker();
        let mut bootstrap = Bootstrap {
            host: splice::bootstrap_host(&pw.host),
            port: pw.spec.bootstrap_port,
            rooms: splice::new_rooms(self.facts.rooms),
            batch: self.facts.batch,
        };
        let mut prefill_extra = Vec::new();
        let mut decode_extra = Vec::new();
        if !self.facts.has_rank {
            if let (true, Some(rank)) = (pw.info.dp_size > 1, pair.prefill.rank()) {
                // room % dp_size = rank: what SGLang without routed_dp_rank places by
                splice::align_rooms(&mut bootstrap.rooms, rank, pw.info.dp_size);
                prefill_extra.push(("routed_dp_rank", rank));
                decode_extra.push(("disagg_prefill_dp_rank", rank));
            }
            if let (true, Some(rank)) = (dw.info.dp_size > 1, pair.decode.rank()) {
                decode_extra.push(("routed_dp_rank", rank));
            }
        }
        Some((
            splice::splice(self.bytes, &bootstrap, &prefill_extra)?,
            splice::splice(self.bytes, &bootstrap, &decode_extra)?,
        ))
    }
}

impl Attempts for PdAttempts<'_> {
    type Output = PdTried;
    type Reason = PdRetry;

    async fn attempt(&mut self, _n: u32) -> PdTried {
        let state = self.state;
        let pair = match self.book().await {
            Ok(p) => p,
            Err(refused) => return refused,
        };
        let pw = pair.prefill.worker().clone();
        let dw = pair.decode.worker().clone();
        self.telemetry.routed(state.selector.policy_name(), &pw);
        self.telemetry.routed(state.selector.policy_name(), &dw);
        self.rid_guard = state
            .refit
            .rids
            .track_on(&self.rids, &[dw.clone(), pw.clone()])
            .or(self.rid_guard.take());
        self.telemetry.sending();
        let Some(bodies) = self.bodies(&pair) else {
            return PdTried::Refused {
                error: ApiError::bad_request("invalid_json", "expected a JSON object"),
            };
        };
        self.send(pair, pw, dw, bodies).await
    }

    fn should_retry(&self, tried: &PdTried) -> Option<PdRetry> {
        match tried {
            PdTried::LegStatus { resp, .. } if is_retryable_status(resp.status()) => {
                Some(PdRetry(match resp.status().as_u16() {
                    408 => "408",
                    429 => "429",
                    500 => "500",
                    502 => "502",
                    503 => "503",
                    _ => "504",
                }))
            }
            PdTried::LegFailed { error, .. } => match error {
                ForwardError::Connect { .. } => Some(PdRetry("connect")),
                ForwardError::Io { .. } => Some(PdRetry("io")),
                ForwardError::Stalled { .. } => Some(PdRetry("stalled")),
                ForwardError::Timeout { .. } | ForwardError::BadUrl { .. } => None,
            },
            _ => None,
        }
    }
}

impl PdAttempts<'_> {
    /// Sends both legs of `pair` at once and settles the attempt on their heads: the leg
    /// that failed or answered an error head is disarmed, so only the other is aborted when
    /// the attempt ends.
    async fn send(
        &mut self,
        pair: Pair,
        pw: Arc<Worker>,
        dw: Arc<Worker>,
        (prefill_body, decode_body): (Bytes, Bytes),
    ) -> PdTried {
        let state = self.state;
        let prefill_headers = with_length(self.headers, prefill_body.len());
        let decode_headers = with_length(self.headers, decode_body.len());
        let timeout = self
            .deadline
            .saturating_duration_since(tokio::time::Instant::now());
        let idle = state.config.limits.stream_idle_timeout;
        let p_unhealthy = || !pw.is_healthy();
        let d_unhealthy = || !dw.is_healthy();
        let path = self.endpoint.path();
        let mut p_abort = LegAbort::armed(state, &pw, &self.rid_guard);
        let mut d_abort = LegAbort::armed(state, &dw, &self.rid_guard);
        let pf = forward(
            &state.client,
            Method::POST,
            pw.as_ref().into(),
            path,
            &prefill_headers,
            prefill_body,
            head_wait(timeout, idle, &p_unhealthy),
        );
        let df = forward(
            &state.client,
            Method::POST,
            dw.as_ref().into(),
            path,
            &decode_headers,
            decode_body,
            head_wait(timeout, idle, &d_unhealthy),
        );
        tokio::pin!(pf, df);
        match heads(&self.telemetry, &pw, &dw, pf, df).await {
            Heads::Failed(Leg::Prefill, error) => {
                p_abort.armed = false;
                self.failed(Leg::Prefill, error, pw.clone())
            }
            Heads::Failed(Leg::Decode, error) => {
                d_abort.armed = false;
                self.failed(Leg::Decode, error, dw.clone())
            }
            Heads::Status(Leg::Prefill, resp) => {
                p_abort.armed = false;
                self.status(Leg::Prefill, resp, pair.prefill)
            }
            Heads::Status(Leg::Decode, resp) => {
                d_abort.armed = false;
                self.status(Leg::Decode, resp, pair.decode)
            }
            Heads::Both { prefill, decode } => {
                p_abort.armed = false;
                d_abort.armed = false;
                PdTried::Answered {
                    prefill,
                    decode,
                    pair,
                }
            }
        }
    }

    fn failed(&mut self, leg: Leg, error: ForwardError, worker: Arc<Worker>) -> PdTried {
        self.tried(leg, worker.id);
        PdTried::LegFailed { leg, error, worker }
    }

    fn status(&mut self, leg: Leg, resp: Response<Incoming>, booking: Booking) -> PdTried {
        self.tried(leg, booking.worker().id);
        PdTried::LegStatus { leg, resp, booking }
    }

    fn tried(&mut self, leg: Leg, id: WorkerId) {
        let list = match leg {
            Leg::Prefill => &mut self.tried_prefill,
            Leg::Decode => &mut self.tried_decode,
        };
        if !list.contains(&id) {
            list.push(id);
        }
    }

    /// The client's response from the last attempt.
    async fn respond(self, last: PdTried) -> Response<RouterBody> {
        match last {
            PdTried::Refused { error } => refuse(self.telemetry, error),
            PdTried::LegFailed { leg, error, worker } => {
                let base = ApiError::from(&error);
                let code = match (leg, base.status) {
                    (Leg::Prefill, StatusCode::GATEWAY_TIMEOUT) => "prefill_timeout",
                    (Leg::Decode, StatusCode::GATEWAY_TIMEOUT) => "decode_timeout",
                    (Leg::Prefill, _) => "prefill_unavailable",
                    (Leg::Decode, _) => "decode_unavailable",
                };
                let e = ApiError::new(
                    base.status,
                    code,
                    format!("{} leg failed: {error}", leg.as_str()),
                );
                worker_error(self.telemetry, e, &worker.url)
            }
            PdTried::LegStatus {
                leg: Leg::Prefill,
                resp,
                booking,
            } => {
                let status = resp.status();
                let body = read_limited(resp.into_body(), 64 << 10, Duration::from_secs(5)).await;
                let url = booking.worker().url.clone();
                worker_error(
                    self.telemetry,
                    merge::prefill_error(status, &url, &body),
                    &url,
                )
            }
            PdTried::LegStatus {
                leg: Leg::Decode,
                resp,
                booking,
            } => self.relay(resp, booking, None),
            PdTried::Answered {
                prefill,
                decode,
                pair,
            } => self.answered(prefill, decode, pair).await,
        }
    }

    /// Both legs answered: the decode response, with the prefill drained (and merged when
    /// `return_logprob` asks for it).
    async fn answered(
        self,
        prefill: Response<Incoming>,
        decode: Response<Incoming>,
        pair: Pair,
    ) -> Response<RouterBody> {
        let Pair {
            prefill: prefill_booking,
            decode: mut decode_booking,
        } = pair;
        let left = self
            .deadline
            .saturating_duration_since(tokio::time::Instant::now());
        if self.facts.return_logprob && !self.input.stream {
            return self
                .merged_whole(prefill, decode, prefill_booking, decode_booking, left)
                .await;
        }
        let pw = prefill_booking.worker().clone();
        let (pparts, mut pbody) = prefill.into_parts();
        let mut merge_list = None;
        let mut first = BytesMut::new();
        if self.facts.return_logprob {
            // Streaming: the prefill's first event carries the prompt's logprobs.
            first = first_event(&mut pbody, left).await;
            merge_list = merge::first_event_logprobs(&first);
        }
        let mut drained_booking = prefill_booking;
        drained_booking.on_response_head(pparts.status);
        if !first.is_empty() {
            drained_booking.on_data(&first);
        }
        let drained = drain(pbody, drained_booking, left);
        let task = self.state.tasks.spawn("pd prefill drain", drained);
        let leg = PrefillLeg {
            task: Some(task),
            tasks: self.state.tasks.clone(),
            client: self.state.client.clone(),
            worker: pw.clone(),
            rids: self.rid_guard.clone(),
            decode_done: false,
        };
        let rewrite: Box<dyn FrameRewrite> = match merge_list {
            Some(prefill_list) => Box::new(SseMerge {
                leg,
                prefill_list,
                buf: BytesMut::new(),
            }),
            None => Box::new(Passthrough(leg)),
        };
        decode_booking.on_response_head(decode.status());
        self.relay(decode, decode_booking, Some(rewrite))
    }

    /// Non-streaming `return_logprob`: both bodies read whole (for at most `left`) and the
    /// prefill's input logprobs merged into the decode response.
    async fn merged_whole(
        self,
        prefill: Response<Incoming>,
        decode: Response<Incoming>,
        mut pb: Booking,
        mut db: Booking,
        left: Duration,
    ) -> Response<RouterBody> {
        let limit = self.state.config.limits.max_payload_size.max(256 << 20);
        pb.on_response_head(prefill.status());
        let (dparts, dbody) = decode.into_parts();
        let (p_bytes, d_bytes) = tokio::join!(
            read_limited(prefill.into_body(), limit, left),
            read_limited(dbody, limit, left)
        );
        pb.on_data(&p_bytes);
        drop(pb);
        let merged = merge::merge_bodies(&p_bytes, &d_bytes).unwrap_or(d_bytes);
        let mut parts = dparts;
        strip_response_headers(&mut parts.headers);
        parts.headers.remove(header::CONTENT_LENGTH);
        parts.headers.remove(header::TRANSFER_ENCODING);
        let url = db.worker().url.clone();
        if let Ok(v) = HeaderValue::from_str(&url) {
            parts.headers.insert(WORKER_HEADER, v);
        }
        self.telemetry.relaying(parts.status, &url);
        db.on_response_head(parts.status);
        db.on_data(&merged);
        self.telemetry.merged_ended(db);
        Response::from_parts(parts, Either::Left(Full::new(merged)))
    }

    /// Relays a decode response (as the regular path does), optionally rewritten.
    fn relay(
        self,
        resp: Response<Incoming>,
        booking: Booking,
        rewrite: Option<Box<dyn FrameRewrite>>,
    ) -> Response<RouterBody> {
        let from = RelayFrom {
            state: self.state,
            telemetry: self.telemetry,
            rids: self.rid_guard,
        };
        relay_response(from, resp, booking, rewrite)
    }
}

/// A streamed body's first SSE event (what came of it within `within`).
async fn first_event(body: &mut Incoming, within: Duration) -> BytesMut {
    let mut first = BytesMut::new();
    let read_first = async {
        while merge::event_end(&first).is_none() {
            match body.frame().await {
                Some(Ok(f)) => {
                    if let Some(d) = f.data_ref() {
                        first.extend_from_slice(d);
                    }
                }
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(within, read_first).await;
    first
}

/// Reads a body whole, up to `limit` bytes and for at most `within` (what came until then).
async fn read_limited(mut body: Incoming, limit: usize, within: Duration) -> Bytes {
    let mut buf = BytesMut::new();
    let read = async {
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => {
                    if let Some(d) = f.data_ref() {
                        if buf.len() + d.len() > limit {
                            break;
                        }
                        buf.extend_from_slice(d);
                    }
                }
                Err(_) => break,
            }
        }
    };
    let _ = tokio::time::timeout(within, read).await;
    buf.freeze()
}

/// Reads the prefill response to its end (its booking, and the KV policy's observer on it,
/// see every chunk), logging a broken or erroring prefill.
async fn drain(mut body: Incoming, mut booking: Booking, within: Duration) {
    let url = booking.worker().url.clone();
    let read = async {
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => {
                    if let Some(d) = f.data_ref() {
                        booking.on_data(d);
                        if d.windows(9).any(|w| w == b"\"error\":{") {
                            tracing::warn!(worker = %url, "PD prefill leg reported an error in its stream");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(worker = %url, error = %e, "PD prefill leg broke mid-body");
                    booking.worker().record_failure();
                    break;
                }
            }
        }
    };
    if tokio::time::timeout(within, read).await.is_err() {
        tracing::warn!(worker = %url, "PD prefill leg did not finish within the request timeout");
    }
}
