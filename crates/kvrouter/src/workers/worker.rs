//! `Worker`: one registered SGLang worker and its live state (health, circuit breaker,
//! in-flight requests, draining/paused/refit flags, weight version, incarnation).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::SystemTime;

use kvrouter_index::{Rank, WorkerId};
use parking_lot::RwLock;
use prometheus::IntGauge;
use tokio::sync::Notify;

use super::breaker::{BreakerConfig, CircuitBreaker, CircuitState, Transition};
use super::gates::Gates;
use super::health_state::{HealthConfig, HealthState, HealthTransition};
use super::info::WorkerInfo;
use super::spec::WorkerSpec;

/// One registered worker. Shared as `Arc<Worker>`; all mutable state is atomic, so
/// request-path reads and updates take no locks.
#[derive(Debug)]
pub struct Worker {
    /// Router-internal id (hot-path key of maps and the KV index).
    pub id: WorkerId,
    /// Public id: a UUID v4 string, the `id`/`worker_id` of the REST API.
    pub public_id: String,
    /// Base URL without a trailing slash, e.g. `http://127.0.0.1:30000`.
    pub url: String,
    /// Host part of `url` (for resolving wildcard KV-event endpoints).
    pub host: String,
    /// Credentials split off the registered URL (`Debug` prints `***`).
    pub credentials: Option<super::url::Credentials>,
    /// What the caller asked for at registration.
    pub spec: WorkerSpec,
    /// Its PD role (`spec.worker_type`; regular when unset or unknown).
    pub role: super::role::Role,
    /// What the worker reported at registration.
    pub info: WorkerInfo,
    /// When it was registered.
    pub registered_at: SystemTime,
    /// `Authorization` sent on every call to this worker (sensitive; `Debug` prints `***`).
    authorization: Option<Secret>,
    pub(super) health: HealthState,
    /// Data-plane outcomes: open after consecutive failures (`--cb-*`).
    breaker: CircuitBreaker,
    in_flight: AtomicUsize,
    rank_in_flight: Box<[AtomicUsize]>,
    draining: AtomicBool,
    paused: AtomicBool,
    awaiting_refit: AtomicBool,
    incompatible: AtomicBool,
    weight_version: RwLock<Option<String>>,
    incarnation: AtomicU64,
    /// The launch marker last read from `/server_info` (`info::incarnation_marker`).
    incarnation_marker: RwLock<Option<String>>,
    reported_load: AtomicI64,
    /// `/v1/loads` or `/get_load`, whichever the worker answers (`load::LoadRoute`).
    pub load_route: super::load::LoadRoute,
    connect_failure_seen: AtomicBool,
    /// Health rounds that found this incarnation answering (see [`Worker::confirmations`]).
    confirmations: AtomicU64,
    drained: Notify,
    pub(super) in_flight_gauge: IntGauge,
    pub(super) healthy_gauge: IntGauge,
    /// `kvrouter_worker_circuit_state`: 0 closed, 1 open, 2 half-open.
    circuit_gauge: IntGauge,
    /// Bumped after any routing gate of this worker changed (`routable.rs`).
    gates: Gates,
}

/// Immutable list of workers in id order, replaced as a whole on change (the registry's).
pub type Snapshot = std::sync::Arc<Vec<std::sync::Arc<Worker>>>;

/// A header value that `Debug` never prints.
struct Secret(http::HeaderValue);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// Everything a new `Worker` is built from.
pub(super) struct NewWorker {
    pub id: WorkerId,
    pub public_id: String,
    pub url: String,
    pub host: String,
    pub credentials: Option<super::url::Credentials>,
    pub spec: WorkerSpec,
    pub info: WorkerInfo,
    pub health: HealthState,
    /// `(in_flight, healthy)` gauges of this worker.
    pub gauges: (IntGauge, IntGauge),
    /// The circuit breaker's settings and its state gauge.
    pub circuit: (BreakerConfig, IntGauge),
    /// The registry's gate generation (`routable.rs`).
    pub gates: Gates,
}

impl Worker {
    pub(super) fn from_parts(parts: NewWorker) -> Worker {
        let NewWorker {
            id,
            public_id,
            url,
            host,
            credentials,
            spec,
            info,
            health,
            gauges,
            circuit,
            gates,
        } = parts;
        let (in_flight_gauge, healthy_gauge) = gauges;
        let (breaker, circuit_gauge) = circuit;
        healthy_gauge.set(1);
        in_flight_gauge.set(0);
        circuit_gauge.set(CircuitState::Closed.gauge());
        let authorization =
            super::http::authorization(spec.api_key.as_deref(), credentials.as_ref())
                .and_then(|v| http::HeaderValue::from_str(&v).ok())
                .map(|mut v| {
                    v.set_sensitive(true);
                    Secret(v)
                });
        Worker {
            id,
            public_id,
            url,
            host,
            credentials,
            authorization,
            weight_version: RwLock::new(info.weight_version.clone()),
            incarnation_marker: RwLock::new(info.incarnation.clone()),
            rank_in_flight: (0..info.dp_size.max(1))
                .map(|_| AtomicUsize::new(0))
                .collect(),
            role: super::role::Role::parse(spec.worker_type.as_deref()).unwrap_or_default(),
            spec,
            info,
            registered_at: SystemTime::now(),
            health,
            in_flight: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            awaiting_refit: AtomicBool::new(false),
            incompatible: AtomicBool::new(false),
            incarnation: AtomicU64::new(0),
            reported_load: AtomicI64::new(-1),
            load_route: super::load::LoadRoute::default(),
            connect_failure_seen: AtomicBool::new(false),
            confirmations: AtomicU64::new(0),
            drained: Notify::new(),
            in_flight_gauge,
            healthy_gauge,
            breaker: CircuitBreaker::new(breaker),
            circuit_gauge,
            gates,
        }
    }

    /// A standalone, healthy, routable worker that does no I/O and is in no registry
    /// (for benchmarks and policy tests). Its gauges are not exported; thresholds
    /// are the defaults of [`HealthConfig`].
    pub fn new(id: WorkerId, url: &str, info: WorkerInfo) -> Worker {
        let url = super::url::worker_url_key(url);
        let host = url::Url::parse(&url)
            .ok()
            .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_string()))
            .unwrap_or_default();
        let defaults = HealthConfig::default();
        let gauge =
            || IntGauge::new("kvrouter_standalone_worker", "unexported").expect("valid gauge");
        Worker::from_parts(NewWorker {
            id,
            public_id: uuid::Uuid::new_v4().to_string(),
            url,
            host,
            credentials: None,
            spec: WorkerSpec::default(),
            info,
            health: HealthState::new(defaults.failure_threshold, defaults.success_threshold),
            gauges: (gauge(), gauge()),
            circuit: (BreakerConfig::default(), gauge()),
            gates: Gates::default(),
        })
    }

    /// The `Authorization` value for calls to this worker: `Bearer <api_key>` when
    /// the spec has one, else `Basic` of the URL's credentials, else none.
    pub fn authorization(&self) -> Option<&str> {
        self.authorization.as_ref().and_then(|v| v.0.to_str().ok())
    }

    /// [`Worker::authorization`] as a header value marked sensitive (what every call to the
    /// worker carries, see `proxy::target`).
    pub fn authorization_header(&self) -> Option<&http::HeaderValue> {
        self.authorization.as_ref().map(|v| &v.0)
    }

    // ---- routing eligibility ----

    /// Health verdict of checks and data-plane outcomes.
    pub fn is_healthy(&self) -> bool {
        self.health.is_healthy()
    }

    /// True when new requests may be sent here: healthy, circuit not open, not draining,
    /// not paused, not awaiting refit, and compatible (page size still accepted after a
    /// restart).
    pub fn is_routable(&self) -> bool {
        self.is_healthy()
            && self.circuit_state() != CircuitState::Open
            && !self.draining.load(Ordering::Acquire)
            && !self.paused.load(Ordering::Acquire)
            && !self.awaiting_refit.load(Ordering::Acquire)
            && !self.incompatible.load(Ordering::Acquire)
    }

    /// Being removed: no new requests, in-flight ones finish.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub(super) fn set_draining(&self) -> bool {
        let first = !self.draining.swap(true, Ordering::SeqCst);
        if first {
            self.gates.bump();
        }
        first
    }

    /// Paused by the refit gate (issue 5).
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }

    /// Opens/closes this worker's routing gate.
    pub fn set_paused(&self, paused: bool) {
        if self.paused.swap(paused, Ordering::SeqCst) != paused {
            self.gates.bump();
        }
    }

    /// Held out of routing until a refit brings its weights level with the fleet.
    pub fn is_awaiting_refit(&self) -> bool {
        self.awaiting_refit.load(Ordering::Acquire)
    }

    pub fn set_awaiting_refit(&self, awaiting: bool) {
        if self.awaiting_refit.swap(awaiting, Ordering::SeqCst) != awaiting {
            self.gates.bump();
        }
    }

    /// Restarted with a page size the router's mode does not accept (kv mode: neither its
    /// `--page-size` nor a divisor of it): never routed to.
    pub fn is_incompatible(&self) -> bool {
        self.incompatible.load(Ordering::Acquire)
    }

    pub(super) fn set_incompatible(&self, v: bool) {
        if self.incompatible.swap(v, Ordering::AcqRel) != v {
            self.gates.bump();
        }
    }

    // ---- in-flight accounting (called by the router's booking guard) ----

    /// Requests dispatched here whose response has not ended.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Counts one request as dispatched. Pair with exactly one [`Self::end_request`].
    pub fn begin_request(&self) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.in_flight_gauge.inc();
    }

    /// Books a request only if the worker's gates are still open (not draining, paused,
    /// awaiting refit or incompatible); returns false (and counts nothing) otherwise.
    /// Closes the race between picking a worker from a snapshot and a concurrent
    /// removal or pause: the gate is set before the in-flight count is read, the count
    /// is raised before the gate is read (both sequentially consistent), so either the
    /// drain waits for this request or this request sees the closed gate.
    pub fn try_begin_request(&self) -> bool {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        if self.gate_closed() {
            self.end_request_uncounted();
            return false;
        }
        self.in_flight_gauge.inc();
        true
    }

    /// [`Self::try_begin_request`] that also counts against DP rank `rank`.
    pub fn try_begin_request_on(&self, rank: Rank) -> bool {
        if !self.try_begin_request() {
            return false;
        }
        if let Some(c) = self.rank_in_flight.get(rank as usize) {
            c.fetch_add(1, Ordering::AcqRel);
        }
        true
    }

    fn gate_closed(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
            || self.paused.load(Ordering::SeqCst)
            || self.awaiting_refit.load(Ordering::SeqCst)
            || self.incompatible.load(Ordering::SeqCst)
    }

    /// Undoes an increment that was never exposed (no gauge change).
    fn end_request_uncounted(&self) {
        if self.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.drained.notify_waiters();
        }
    }

    /// Counts one request as finished (response fully sent or dropped). Wakes a
    /// drain waiting for zero. Never underflows.
    pub fn end_request(&self) {
        let prev = self
            .in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        match prev {
            Ok(prev) => {
                self.in_flight_gauge.dec();
                if prev == 1 {
                    self.drained.notify_waiters();
                }
            }
            Err(_) => tracing::error!(worker = %self.url, "end_request without begin_request"),
        }
    }

    /// Like [`Self::begin_request`], also counted against DP rank `rank` (ranks
    /// outside `ranks()` count only in the total). Pair with [`Self::end_request_on`].
    pub fn begin_request_on(&self, rank: Rank) {
        if let Some(c) = self.rank_in_flight.get(rank as usize) {
            c.fetch_add(1, Ordering::AcqRel);
        }
        self.begin_request();
    }

    /// Ends a request begun with [`Self::begin_request_on`] for the same rank.
    pub fn end_request_on(&self, rank: Rank) {
        if let Some(c) = self.rank_in_flight.get(rank as usize) {
            let _ = c.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        }
        self.end_request();
    }

    /// Requests in flight on DP rank `rank` (only those booked with a rank).
    pub fn in_flight_on(&self, rank: Rank) -> usize {
        self.rank_in_flight
            .get(rank as usize)
            .map_or(0, |c| c.load(Ordering::Acquire))
    }

    /// Waits until no request is in flight.
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.in_flight() == 0 {
                return;
            }
            notified.await;
        }
    }

    // ---- circuit breaker ----

    /// The circuit's state now (an open circuit past its timeout turns half-open here).
    pub fn circuit_state(&self) -> CircuitState {
        let (state, transition) = self.breaker.check();
        if let Some(t) = transition {
            self.circuit_changed(t);
        }
        state
    }

    /// When this worker's open circuit turns half-open (`None` unless open).
    pub(crate) fn circuit_half_open_at(&self) -> Option<tokio::time::Instant> {
        self.breaker.half_open_at()
    }

    /// Consecutive failures (closed) or successes (half-open) the breaker counted.
    pub fn circuit_streak(&self) -> u32 {
        self.breaker.streak()
    }

    /// One data-plane attempt's outcome for the circuit breaker: `success` is a 2xx
    /// response head (sgl-router counts every other status, and no response, as a failure).
    pub fn record_outcome(&self, success: bool) {
        let transition = self.breaker.record(success);
        if let Some(t) = transition {
            self.circuit_changed(t);
        } else {
            self.circuit_compat(self.breaker.state());
        }
    }

    /// The sgl-router / SMG compat series of this worker's circuit (state and streaks).
    fn circuit_compat(&self, state: CircuitState) {
        let streak = self.breaker.streak();
        let (failures, successes) = match state {
            CircuitState::HalfOpen => (0, streak),
            _ => (streak, 0),
        };
        crate::metrics::compat::circuit_state(&self.url, compat_code(state), failures, successes);
    }

    fn circuit_changed(&self, t: Transition) {
        self.gates.bump();
        self.circuit_gauge.set(t.to.gauge());
        super::metrics::FleetMetrics::get().circuit_transition(&self.url, t);
        crate::metrics::compat::circuit_transition(
            &self.url,
            compat_code(t.from),
            compat_code(t.to),
        );
        self.circuit_compat(t.to);
        match t.to {
            CircuitState::Open => tracing::warn!(
                worker = %self.url, from = t.from.as_str(),
                "circuit opened: no requests to this worker until the breaker timeout passes"
            ),
            _ => tracing::info!(
                worker = %self.url, from = t.from.as_str(), to = t.to.as_str(),
                "circuit breaker state changed"
            ),
        }
    }

    // ---- passive health from the data plane ----

    /// A response came back (2xx-4xx). Returns the transition if the worker recovered.
    pub fn record_success(&self) -> Option<HealthTransition> {
        let t = self.health.record_success();
        if t.is_some() {
            self.gates.bump();
            self.healthy_gauge.set(1);
        }
        t
    }

    /// A connect error, timeout or 5xx before the first byte. Returns the transition
    /// if this failure made the worker unhealthy.
    pub fn record_failure(&self) -> Option<HealthTransition> {
        let t = self.health.record_failure();
        if t.is_some() {
            self.gates.bump();
            tracing::warn!(worker = %self.url, "worker marked unhealthy after consecutive failures");
            self.healthy_gauge.set(0);
        }
        t
    }

    /// Like [`Self::record_failure`] for a refused/failed TCP connect: also flags a
    /// possible restart, confirmed (incarnation bumped, info re-read) by the next
    /// successful health check.
    pub fn record_connect_failure(&self) -> Option<HealthTransition> {
        self.note_connect_failure();
        self.record_failure()
    }

    pub fn consecutive_failures(&self) -> u32 {
        self.health.consecutive_failures()
    }

    pub fn consecutive_successes(&self) -> u32 {
        self.health.consecutive_successes()
    }

    pub(super) fn note_connect_failure(&self) {
        self.connect_failure_seen.store(true, Ordering::Release);
    }

    pub(super) fn take_connect_failure(&self) -> bool {
        self.connect_failure_seen.swap(false, Ordering::AcqRel)
    }

    /// How many health rounds found this worker answering with no sign of a new process
    /// (no refused connect before, launch marker unchanged). A KV event source that
    /// reconnected waits for this to grow before it trusts what the endpoint sends
    /// (`events::trust`).
    pub fn confirmations(&self) -> u64 {
        self.confirmations.load(Ordering::Acquire)
    }

    /// Records one confirming health round (the health checker's call).
    pub fn confirm(&self) {
        self.confirmations.fetch_add(1, Ordering::AcqRel);
    }

    // ---- versions and restarts ----

    /// Current weight version (updated by refits and restart probes).
    pub fn weight_version(&self) -> Option<String> {
        self.weight_version.read().clone()
    }

    pub fn set_weight_version(&self, version: Option<String>) {
        *self.weight_version.write() = version;
    }

    /// Bumped each time the worker is found to have restarted (0 at registration).
    pub fn incarnation(&self) -> u64 {
        self.incarnation.load(Ordering::Acquire)
    }

    /// Records a restart (new process behind the same URL); returns the new incarnation.
    pub fn bump_incarnation(&self) -> u64 {
        self.incarnation.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The launch marker last read from the worker's `/server_info` (None: it has none).
    pub fn incarnation_marker(&self) -> Option<String> {
        self.incarnation_marker.read().clone()
    }

    /// Stores `marker`; true when a marker was known and differs (a new launch).
    pub(super) fn swap_incarnation_marker(&self, marker: Option<String>) -> bool {
        let mut cur = self.incarnation_marker.write();
        let changed = cur.is_some() && marker.is_some() && *cur != marker;
        if marker.is_some() {
            *cur = marker;
        }
        changed
    }

    // ---- load and ranks ----

    /// Token load last reported by `/v1/loads` or `/get_load` (None when not polled or unreadable).
    pub fn reported_load(&self) -> Option<i64> {
        let v = self.reported_load.load(Ordering::Relaxed);
        (v >= 0).then_some(v)
    }

    pub(super) fn set_reported_load(&self, load: Option<i64>) {
        self.reported_load
            .store(load.unwrap_or(-1).max(-1), Ordering::Relaxed);
    }

    /// DP ranks of this worker: `0..dp_size`.
    pub fn ranks(&self) -> std::ops::Range<Rank> {
        0..self.info.dp_size.max(1)
    }

    /// KV event endpoints to dial, one per DP rank: `(rank, pub endpoint, replay
    /// endpoint)`. From the `/server_info` `kv_events` block when the worker advertises one
    /// (SGLang 0.5.23+), else from the `kv_events_config` string. Empty when the worker does
    /// not publish or publishes outward (its endpoint names a subscriber that must bind
    /// instead: `"bind": false`, or a concrete host without `"bind": true`).
    pub fn kv_event_endpoints(&self) -> Vec<(Rank, String, Option<String>)> {
        let config = self.info.kv_events.as_ref();
        if config.is_some_and(|kv| !kv.worker_binds()) {
            return Vec::new();
        }
        if let Some(block) = self.info.kv_events_block.as_ref().filter(|b| b.is_zmq()) {
            return self
                .ranks()
                .filter_map(|r| {
                    let endpoint = block.endpoint(&self.host, r)?;
                    Some((r, endpoint, block.replay_endpoint(&self.host, r)))
                })
                .collect();
        }
        let Some(kv) = config.filter(|kv| kv.is_enabled()) else {
            return Vec::new();
        };
        self.ranks()
            .filter_map(|r| {
                let endpoint = kv.dial_endpoint(&self.host, r)?;
                Some((r, endpoint, kv.dial_replay_endpoint(&self.host, r)))
            })
            .collect()
    }

    /// The topic frame of the worker's KV events (block first, then the config string).
    pub fn kv_event_topic(&self) -> String {
        self.info
            .kv_events_block
            .as_ref()
            .map(|b| b.topic.clone())
            .or_else(|| self.info.kv_events.as_ref().map(|k| k.topic.clone()))
            .unwrap_or_default()
    }

    /// Model id reported for this worker: the spec override, else the served name.
    pub fn model_id(&self) -> Option<&str> {
        self.spec
            .model_id
            .as_deref()
            .or(self.info.served_model_name.as_deref())
    }
}

/// The compat series' code for a circuit state.
fn compat_code(state: CircuitState) -> crate::metrics::compat::CircuitCode {
    use crate::metrics::compat::CircuitCode;
    match state {
        CircuitState::Closed => CircuitCode::Closed,
        CircuitState::Open => CircuitCode::Open,
        CircuitState::HalfOpen => CircuitCode::HalfOpen,
    }
}

impl crate::metrics::subjects::SeriesWorker for Worker {
    fn url(&self) -> &str {
        &self.url
    }

    fn model_id(&self) -> Option<&str> {
        Worker::model_id(self)
    }
}

/// A worker of `gates` with the breaker `breaker` (health: 2 failures, 1 success).
#[cfg(test)]
pub(super) fn test_worker_with(id: u32, gates: &Gates, breaker: BreakerConfig) -> Worker {
    let mut w = Worker::new(
        WorkerId(id),
        &format!("http://h{id}:1"),
        WorkerInfo::default(),
    );
    w.health = HealthState::new(2, 1);
    w.breaker = CircuitBreaker::new(breaker);
    w.gates = gates.clone();
    w
}

#[cfg(test)]
pub(super) fn test_worker(id: u32, url: &str) -> Worker {
    let mut w = Worker::new(WorkerId(id), url, WorkerInfo::default());
    w.public_id = format!("uuid-{id}");
    w.health = HealthState::new(2, 1);
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn routable_requires_every_gate_open() {
        let w = test_worker(1, "http://a");
        assert!(w.is_routable());
        w.set_paused(true);
        assert!(!w.is_routable());
        w.set_paused(false);
        w.set_awaiting_refit(true);
        assert!(!w.is_routable());
        w.set_awaiting_refit(false);
        w.record_failure();
        w.record_failure();
        assert!(!w.is_healthy() && !w.is_routable());
        w.record_success();
        assert!(w.is_routable());
        assert!(w.set_draining());
        assert!(
            !w.set_draining(),
            "second call reports it was already draining"
        );
        assert!(!w.is_routable());
    }

    #[test]
    fn try_begin_respects_closed_gates() {
        let w = test_worker(1, "http://a");
        assert!(w.try_begin_request());
        assert_eq!(w.in_flight(), 1);
        w.set_paused(true);
        assert!(!w.try_begin_request());
        assert_eq!(w.in_flight(), 1, "a refused booking counts nothing");
        w.set_paused(false);
        w.set_draining();
        assert!(!w.try_begin_request_on(0));
        assert_eq!((w.in_flight(), w.in_flight_on(0)), (1, 0));
        w.end_request();
        assert_eq!((w.in_flight(), w.in_flight_gauge.get()), (0, 0));
    }

    #[test]
    fn in_flight_never_underflows() {
        let w = test_worker(1, "http://a");
        w.begin_request();
        w.begin_request();
        assert_eq!(w.in_flight(), 2);
        w.end_request();
        w.end_request();
        w.end_request();
        assert_eq!(w.in_flight(), 0);
        assert_eq!(w.in_flight_gauge.get(), 0);
    }

    #[tokio::test]
    async fn wait_idle_returns_when_last_request_ends() {
        let w = Arc::new(test_worker(1, "http://a"));
        w.begin_request();
        w.begin_request();
        let waiter = crate::tasks::Tasks::new().spawn("test waiter", {
            let w = w.clone();
            async move { w.wait_idle().await }
        });
        tokio::task::yield_now().await;
        w.end_request();
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one request still in flight");
        w.end_request();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("drain finished")
            .expect("task ok");
    }

    #[test]
    fn per_rank_counts_add_to_the_total() {
        let info = WorkerInfo {
            dp_size: 2,
            ..WorkerInfo::default()
        };
        let w = Worker::new(WorkerId(1), "http://a", info);
        w.begin_request_on(1);
        w.begin_request_on(7); // unknown rank: total only
        assert_eq!(
            (w.in_flight(), w.in_flight_on(0), w.in_flight_on(1)),
            (2, 0, 1)
        );
        w.end_request_on(1);
        w.end_request_on(7);
        assert_eq!((w.in_flight(), w.in_flight_on(1)), (0, 0));
    }

    #[test]
    fn kv_event_endpoints_per_rank() {
        let info = WorkerInfo {
            dp_size: 2,
            kv_events: crate::workers::info::KvEventsConfig::from_field(&serde_json::json!(
                r#"{"publisher":"zmq","endpoint":"tcp://*:6000","replay_endpoint":"tcp://*:7000"}"#
            )),
            ..WorkerInfo::default()
        };
        let w = Worker::new(WorkerId(1), "http://10.1.2.3:30000", info);
        assert_eq!(
            w.kv_event_endpoints(),
            vec![
                (
                    0,
                    "tcp://10.1.2.3:6000".into(),
                    Some("tcp://10.1.2.3:7000".into())
                ),
                (
                    1,
                    "tcp://10.1.2.3:6001".into(),
                    Some("tcp://10.1.2.3:7001".into())
                ),
            ]
        );
        assert!(test_worker(2, "http://a").kv_event_endpoints().is_empty());
    }

    #[test]
    fn kv_event_endpoints_from_the_block_then_the_string() {
        // 0.5.23: block present, string on 0.0.0.0 (binds): the block's ports, worker host.
        let info = WorkerInfo::from_json(
            &serde_json::json!({"dp_size": 2,
                "kv_events_config": "{\"publisher\": \"zmq\", \"endpoint\": \"tcp://0.0.0.0:19078\"}",
                "kv_events": {"publisher": "zmq", "endpoint_host": "0.0.0.0", "endpoint_port_base": 19078,
                    "topic": "t", "block_size": 16, "dp_size": 2, "replay_endpoint_port_base": 19080}}),
            None,
        );
        let w = Worker::new(WorkerId(1), "http://10.1.2.3:30000", info);
        assert_eq!(
            w.kv_event_endpoints(),
            vec![
                (
                    0,
                    "tcp://10.1.2.3:19078".into(),
                    Some("tcp://10.1.2.3:19080".into())
                ),
                (
                    1,
                    "tcp://10.1.2.3:19079".into(),
                    Some("tcp://10.1.2.3:19081".into())
                ),
            ]
        );
        assert_eq!(w.kv_event_topic(), "t");
        // Connect mode stated by the string wins over the block (nothing listens there).
        let info = WorkerInfo::from_json(
            &serde_json::json!({
                "kv_events_config": "{\"publisher\": \"zmq\", \"endpoint\": \"tcp://10.9.9.9:19078\"}",
                "kv_events": {"publisher": "zmq", "endpoint_host": "10.9.9.9", "endpoint_port_base": 19078}}),
            None,
        );
        let w = Worker::new(WorkerId(2), "http://10.1.2.3:30000", info);
        assert!(w.kv_event_endpoints().is_empty());
        // The string alone (older SGLang), bind: true on a concrete host.
        let info = WorkerInfo::from_json(
            &serde_json::json!({
                "kv_events_config": "{\"publisher\": \"zmq\", \"endpoint\": \"tcp://127.0.0.1:19088\", \"bind\": true}"}),
            None,
        );
        let w = Worker::new(WorkerId(3), "http://10.1.2.3:30000", info);
        assert_eq!(
            w.kv_event_endpoints(),
            vec![(0, "tcp://127.0.0.1:19088".into(), None)]
        );
    }

    #[test]
    fn incarnation_marker_swaps() {
        let info = WorkerInfo {
            incarnation: Some("a".into()),
            ..WorkerInfo::default()
        };
        let w = Worker::new(WorkerId(1), "http://a", info);
        assert!(!w.swap_incarnation_marker(Some("a".into())));
        assert!(
            !w.swap_incarnation_marker(None),
            "an unreadable info is no restart"
        );
        assert!(w.swap_incarnation_marker(Some("b".into())));
        assert_eq!(w.incarnation_marker().as_deref(), Some("b"));
        let none = test_worker(2, "http://b");
        assert!(
            !none.swap_incarnation_marker(Some("x".into())),
            "first marker learned"
        );
        assert_eq!(none.incarnation_marker().as_deref(), Some("x"));
    }

    #[test]
    fn ranks_and_incarnation() {
        let w = test_worker(1, "http://a");
        assert_eq!(w.ranks(), 0..1);
        assert_eq!(w.incarnation(), 0);
        assert_eq!(w.bump_incarnation(), 1);
        assert_eq!(w.reported_load(), None);
        w.set_reported_load(Some(12));
        assert_eq!(w.reported_load(), Some(12));
    }
}
