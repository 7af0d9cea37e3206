//! [`RequestTelemetry`]: everything one data-plane request records, as one value carried along
//! the request path (handler, attempts, PD legs, relayed body).
//!
//! The value is created when the handler accepts a request and owns what the metrics need: the
//! route, whether the request streams, when it arrived, whether its first upstream request has
//! left and its first body chunk come, and whether its end was recorded. Its phase methods fan
//! out to the native `kvrouter_*` series ([`ProxyMetrics`]), the `--metrics-compat` sgl-router /
//! SMG series ([`crate::metrics::compat`]) and the per-request end record
//! ([`crate::metrics::request_end`]), so the attempt, relay and PD dispatch code hold no metrics
//! calls. The phases, in request order:
//!
//! - [`accepted`](RequestTelemetry::accepted), [`parsed`](RequestTelemetry::parsed);
//! - per attempt: [`routed`](RequestTelemetry::routed) (once per PD leg),
//!   [`sending`](RequestTelemetry::sending) (the first records the router overhead), then per
//!   worker [`upstream_answered`](RequestTelemetry::upstream_answered) or
//!   [`upstream_failed`](RequestTelemetry::upstream_failed) (plus
//!   [`attempt_stalled`](RequestTelemetry::attempt_stalled) on the regular path); between
//!   attempts the retry driver reports through [`RetryTelemetry`];
//! - one end: the router's own answer ([`refused`](RequestTelemetry::refused) before any worker
//!   was tried, [`gave_up`](RequestTelemetry::gave_up) after one), or a worker's response
//!   [`relaying`](RequestTelemetry::relaying), its [`body_chunk`](RequestTelemetry::body_chunk)s,
//!   maybe [`relay_failed`](RequestTelemetry::relay_failed), and
//!   [`relay_ended`](RequestTelemetry::relay_ended) when the body is sent whole or dropped (a
//!   client that leaves mid-body ends it the same way); a PD response merged whole ends with
//!   [`merged_ended`](RequestTelemetry::merged_ended).
//!
//! A value dropped without an end records nothing more: a request whose client left before any
//! response head was counted is in no request total.

use std::time::Duration;

use http::StatusCode;
use tokio::time::Instant;

use super::forward::ForwardError;
use super::metrics::ProxyMetrics;
use super::relay_error::RelayError;
use super::retry::RetryHooks;
use crate::metrics::{compat, request_end};
use crate::routing::{Booking, Endpoint};
use crate::workers::Worker;

/// What one data-plane request records (see module docs).
#[derive(Debug)]
pub struct RequestTelemetry {
    endpoint: Endpoint,
    stream: bool,
    started: Instant,
    /// The first upstream request has left (the router overhead is recorded).
    sent: bool,
    /// The first relayed body chunk has come (the time to first byte is recorded).
    first_chunk: bool,
    /// The end of the relayed response is recorded.
    ended: bool,
}

impl RequestTelemetry {
    /// A request to `endpoint` that arrived at `started`.
    pub fn accepted(endpoint: Endpoint, started: Instant) -> RequestTelemetry {
        RequestTelemetry {
            endpoint,
            stream: false,
            started,
            sent: false,
            first_chunk: false,
            ended: false,
        }
    }

    /// Its body was parsed: `stream` says whether the client asked for a stream.
    pub fn parsed(&mut self, stream: bool) {
        self.stream = stream;
    }

    /// The `route` label (the endpoint's).
    pub fn route(&self) -> &'static str {
        self.endpoint.label()
    }

    /// When the request arrived.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// `policy` (a kvrouter policy name) picked `worker` for an attempt (a PD attempt: once
    /// per leg).
    pub fn routed(&self, policy: &str, worker: &Worker) {
        compat::selection(policy, worker);
    }

    /// An attempt's upstream request is about to leave: the first one records the router
    /// overhead (arrival until then: read, parse, route, book).
    pub fn sending(&mut self) {
        if self.sent {
            return;
        }
        self.sent = true;
        ProxyMetrics::get()
            .route(self.endpoint)
            .overhead
            .observe(self.started.elapsed().as_secs_f64());
    }

    /// `worker` answered an attempt (or a PD leg) with `status`; a 5xx is an upstream failure.
    pub fn upstream_answered(&self, worker: &Worker, status: StatusCode) {
        compat::upstream_response(self.route(), status.as_u16());
        if status.is_server_error() {
            upstream_failure(worker, status.as_str());
        }
    }

    /// `worker` gave no response head to an attempt (or a PD leg).
    pub fn upstream_failed(&self, worker: &Worker, error: &ForwardError) {
        upstream_failure(worker, error.kind());
    }

    /// A regular attempt was abandoned: its worker turned unhealthy while nothing came for
    /// `stream_idle_timeout` (the limit trips).
    pub fn attempt_stalled(&self) {
        ProxyMetrics::limit_tripped("stream_idle_timeout");
    }

    /// What the retry driver reports to: `what` is its debug line on a retry.
    pub fn retries(&self, what: &'static str) -> RetryTelemetry {
        RetryTelemetry {
            route: self.route(),
            what,
        }
    }

    /// The router answered `status` itself before any worker was tried (recorded as not
    /// streamed: the answer is one JSON body).
    pub fn refused(self, status: StatusCode) {
        router_answered(self.route(), false, status, "");
    }

    /// The router answered `status` itself after trying the worker at `worker`.
    pub fn gave_up(self, status: StatusCode, worker: &str) {
        router_answered(self.route(), self.stream, status, worker);
    }

    /// The worker at `worker` answered `status` and its response is relayed to the client.
    pub fn relaying(&self, status: StatusCode, worker: &str) {
        count_request(self.route(), status, worker);
        compat::request_done(self.route(), self.stream, status.as_u16(), true, worker);
    }

    /// A data chunk of the relayed body goes out: the first one of a stream records the time
    /// to first byte.
    pub fn body_chunk(&mut self) {
        if self.first_chunk {
            return;
        }
        self.first_chunk = true;
        if self.stream {
            let secs = self.started.elapsed().as_secs_f64();
            ProxyMetrics::get()
                .first_byte
                .with_label_values(&[self.route()])
                .observe(secs);
            compat::first_token(self.route(), secs);
        }
    }

    /// The relayed body from `worker` ended early (`error`): an upstream failure, and a limit
    /// trip when the worker stalled.
    pub fn relay_failed(&self, worker: &Worker, error: &RelayError) {
        if matches!(error, RelayError::Stalled(_)) {
            ProxyMetrics::limit_tripped("stream_idle_timeout");
        }
        upstream_failure(worker, error.kind());
    }

    /// The relayed response ended (sent whole, cut, or dropped by the client): its duration and
    /// the request-end record of `booking` (released on return). Recorded once.
    pub fn relay_ended(&mut self, booking: Option<Booking>) {
        if self.ended {
            return;
        }
        self.ended = true;
        let secs = self.started.elapsed().as_secs_f64();
        request_end::relayed(self.route(), self.stream, secs, booking);
        ProxyMetrics::get().route(self.endpoint).duration[usize::from(self.stream)].observe(secs);
        compat::request_duration(self.route(), secs);
    }

    /// A PD response merged whole (non-streaming `return_logprob`) was answered: the
    /// request-end record of the decode `booking` (released on return). No duration series is
    /// recorded for it (as before this value existed).
    pub fn merged_ended(self, booking: Booking) {
        let secs = self.started.elapsed().as_secs_f64();
        request_end::relayed(self.route(), self.stream, secs, Some(booking));
    }
}

/// A data-plane request on `route` answered `status` by the router itself at admission, before
/// the handler accepted it (no [`RequestTelemetry`] exists yet).
pub(crate) fn refused_at_admission(route: &'static str, status: StatusCode) {
    router_answered(route, false, status, "");
}

/// The router's own answer (`worker`: the last worker tried, or empty).
fn router_answered(route: &'static str, stream: bool, status: StatusCode, worker: &str) {
    count_request(route, status, worker);
    compat::request_done(route, stream, status.as_u16(), false, worker);
    request_end::answered_by_router(route, stream, status.as_u16(), worker);
}

/// `kvrouter_requests_total{route,status,worker}`.
fn count_request(route: &'static str, status: StatusCode, worker: &str) {
    ProxyMetrics::get()
        .requests
        .with_label_values(&[route, status.as_str(), worker])
        .inc();
}

/// `kvrouter_upstream_failures_total{worker,kind}`.
fn upstream_failure(worker: &Worker, kind: &str) {
    ProxyMetrics::get()
        .upstream_failures
        .with_label_values(&[worker.url.as_str(), kind])
        .inc();
}

/// Why an attempt is repeated, as the `reason` label of `kvrouter_retries_total`.
pub(crate) trait RetryLabel {
    fn label(&self) -> &str;
}

/// The retry driver's view of a [`RequestTelemetry`]: retries by route and reason.
#[derive(Debug, Clone, Copy)]
pub struct RetryTelemetry {
    route: &'static str,
    what: &'static str,
}

impl<R: RetryLabel> RetryHooks<R> for RetryTelemetry {
    fn on_retry(&mut self, attempt: u32, reason: &R, delay: Duration) {
        tracing::debug!(attempt, reason = reason.label(), ?delay, "{}", self.what);
        ProxyMetrics::get()
            .retries
            .with_label_values(&[self.route, reason.label()])
            .inc();
        compat::retry(self.route, attempt, delay);
    }

    fn on_exhausted(&mut self, _attempts: u32, _reason: &R) {
        compat::retries_exhausted(self.route);
    }
}

/// Held by the lib tests that count samples of the per-route histograms (process-wide series).
#[cfg(test)]
pub(crate) static ROUTE_SERIES: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::{WorkerId, WorkerInfo};

    fn worker(port: u16) -> Worker {
        let url = format!("http://telemetry-test:{port}");
        Worker::new(WorkerId(u32::from(port)), &url, WorkerInfo::default())
    }

    fn requests(route: &str, status: &str, worker: &str) -> u64 {
        let m = ProxyMetrics::get();
        m.requests.with_label_values(&[route, status, worker]).get()
    }

    fn failures(worker: &Worker, kind: &str) -> u64 {
        let m = ProxyMetrics::get();
        m.upstream_failures
            .with_label_values(&[worker.url.as_str(), kind])
            .get()
    }

    /// Sample counts of the route's overhead, first-byte and streamed-duration histograms.
    fn route_samples(endpoint: Endpoint) -> [u64; 3] {
        let m = ProxyMetrics::get();
        let r = m.route(endpoint);
        [
            r.overhead.get_sample_count(),
            m.first_byte
                .with_label_values(&[endpoint.label()])
                .get_sample_count(),
            r.duration[1].get_sample_count(),
        ]
    }

    struct Reason(&'static str);

    impl RetryLabel for Reason {
        fn label(&self) -> &str {
            self.0
        }
    }

    /// The regular path's calls for a request answered 503 by one worker, retried, and
    /// streamed by another: one overhead sample, the 503 as an upstream failure and a retry
    /// (not as a request), the relayed 200 as the request, one first byte, one duration.
    #[test]
    fn a_retried_then_streamed_request_records_one_request_and_one_retry() {
        let _lock = ROUTE_SERIES.lock();
        let (w1, w2) = (worker(41001), worker(41002));
        let route = Endpoint::Completions.label();
        let before = route_samples(Endpoint::Completions);
        let retries = ProxyMetrics::get()
            .retries
            .with_label_values(&[route, "telemetry_test"]);
        let retried = retries.get();
        let mut t = RequestTelemetry::accepted(Endpoint::Completions, Instant::now());
        t.parsed(true);
        t.routed("round-robin", &w1);
        t.sending();
        t.upstream_answered(&w1, StatusCode::SERVICE_UNAVAILABLE);
        let mut hooks = t.retries("retrying on another worker");
        RetryHooks::on_retry(&mut hooks, 0, &Reason("telemetry_test"), Duration::ZERO);
        t.routed("round-robin", &w2);
        t.sending();
        t.upstream_answered(&w2, StatusCode::OK);
        t.relaying(StatusCode::OK, &w2.url);
        t.body_chunk();
        t.body_chunk();
        t.relay_ended(None);
        t.relay_ended(None);
        let after = route_samples(Endpoint::Completions);
        assert_eq!(after, [before[0] + 1, before[1] + 1, before[2] + 1]);
        assert_eq!(retries.get(), retried + 1);
        assert_eq!(failures(&w1, "503"), 1);
        assert_eq!(failures(&w2, "200"), 0);
        assert_eq!(requests(route, "503", &w1.url), 0);
        assert_eq!(requests(route, "200", &w2.url), 1);
    }

    /// A request whose client left during its attempts (the value dropped without an end)
    /// counts no request and no duration, as before the value existed.
    #[test]
    fn dropped_without_an_end_records_no_request() {
        let _lock = ROUTE_SERIES.lock();
        let w = worker(41003);
        let before = route_samples(Endpoint::Generate);
        {
            let mut t = RequestTelemetry::accepted(Endpoint::Generate, Instant::now());
            t.parsed(true);
            t.routed("random", &w);
            t.sending();
        }
        let after = route_samples(Endpoint::Generate);
        assert_eq!(
            after[0],
            before[0] + 1,
            "the request left: overhead recorded"
        );
        assert_eq!(after[1..], before[1..], "no first byte, no duration");
        for status in ["200", "499", "502", "504"] {
            assert_eq!(requests("generate", status, &w.url), 0);
        }
    }

    /// The router's own answers: a refusal is counted unnamed and not streamed, a failure
    /// after a worker names it; a stalled relay is an upstream failure and a limit trip.
    #[test]
    fn router_answers_and_broken_relays() {
        let w = worker(41004);
        let mut t = RequestTelemetry::accepted(Endpoint::ChatCompletions, Instant::now());
        t.parsed(true);
        t.gave_up(StatusCode::BAD_GATEWAY, &w.url);
        assert_eq!(requests("chat_completions", "502", &w.url), 1);

        let trips =
            crate::metrics::limits::limit_trips().with_label_values(&["stream_idle_timeout"]);
        let tripped = trips.get();
        let t = RequestTelemetry::accepted(Endpoint::ChatCompletions, Instant::now());
        t.relay_failed(&w, &RelayError::Stalled(Duration::from_secs(1)));
        t.relay_failed(&w, &RelayError::Broken("reset".into()));
        assert!(trips.get() > tripped);
        assert_eq!(failures(&w, "stalled"), 1);
        assert_eq!(failures(&w, "stream_broken"), 1);
        t.upstream_failed(
            &w,
            &ForwardError::Connect {
                url: w.url.clone(),
                message: "refused".into(),
            },
        );
        assert_eq!(failures(&w, "connect"), 1);
    }

    /// A refusal names no worker; a stalled regular attempt trips `stream_idle_timeout` (a PD
    /// leg that stalls only counts as an upstream failure, as before).
    #[test]
    fn refusals_and_stalled_attempts() {
        let refused = || requests("generate", "413", "");
        let before = refused();
        RequestTelemetry::accepted(Endpoint::Generate, Instant::now())
            .refused(StatusCode::PAYLOAD_TOO_LARGE);
        assert!(refused() > before);

        let trips =
            crate::metrics::limits::limit_trips().with_label_values(&["stream_idle_timeout"]);
        let tripped = trips.get();
        let t = RequestTelemetry::accepted(Endpoint::Generate, Instant::now());
        t.attempt_stalled();
        assert!(trips.get() > tripped);
        let w = worker(41005);
        let stalled = ForwardError::Stalled {
            url: w.url.clone(),
            after: Duration::from_secs(1),
        };
        t.upstream_failed(&w, &stalled);
        assert_eq!(failures(&w, "stalled"), 1);
    }
}
