//! `Registry`: the set of registered workers. Cheap to clone; reads on the request
//! path are one uncontended read lock plus an `Arc` clone of an immutable snapshot
//! that is replaced on every change. Also owns registration jobs, draining removal
//! and change notifications.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kvrouter_index::WorkerId;
use parking_lot::{Mutex, RwLock};
use serde_json::Value;
use tokio::sync::{broadcast, watch};

use super::breaker::BreakerConfig;
use super::health::{self, CheckedFleet, HealthConfig, HealthState};
use super::http::{authorization, new_client, HttpClient};
use super::info::WorkerInfo;
use super::job::{Job, JobStatus};
use super::metrics::FleetMetrics;
use super::probe::{probe_worker, read_info, AddWorkerError, PageSizeRule, ProbeTimeouts};
use super::routable::Routable;
use super::spec::WorkerSpec;
use super::url::{
    check_worker_host, check_worker_literal, parse_worker_address, worker_url_key, Credentials,
    WorkerAddress,
};
use super::views;
use super::worker::{NewWorker, Snapshot, Worker};
use crate::tasks::Tasks;

/// Registry settings (built by `config`).
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// Which worker page sizes are registered (kv mode: the router's `--page-size` or a
    /// divisor of it; other modes: any).
    pub page_size: PageSizeRule,
    /// Periodic health checks.
    pub health: HealthConfig,
    /// Deadline of each HTTP call of the registration probe (also the connect timeout).
    pub probe_timeout: Duration,
    /// Pooled probe and health-check connections idle longer than this are not reused
    /// (`--worker-idle-timeout-secs`, below the workers' keep-alive).
    pub idle_timeout: Duration,
    /// How long registration retries `/health` while a worker warms up.
    pub startup_timeout: Duration,
    /// How long removal waits for in-flight requests before removing anyway.
    pub drain_timeout: Duration,
    /// Hold a worker that registers or restarts at a weight version other than the
    /// fleet's agreed one out of routing (`awaiting_refit`) until a refit levels it.
    pub hold_version_mismatch: bool,
    /// `--worker-allow-cidr`: when non-empty, only worker addresses inside it are
    /// registered (hostnames are resolved at registration); when empty, every address
    /// but a link-local one.
    pub allow_cidrs: Vec<ipnet::IpNet>,
    /// Credentials split off configured `--worker-urls` (by canonical URL), applied
    /// when that URL is registered without credentials of its own.
    pub credentials: Vec<(String, Credentials)>,
    /// Worker key for workers registered without an `api_key` or URL credentials of their own
    /// (sgl-router's `--api-key` is both the router's key and the default worker key).
    pub default_api_key: Option<String>,
    /// Every worker's circuit breaker (`--cb-*`).
    pub breaker: BreakerConfig,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            page_size: PageSizeRule::Folds { router: 16 },
            health: HealthConfig::default(),
            probe_timeout: Duration::from_secs(10),
            idle_timeout: super::http::WORKER_IDLE_TIMEOUT,
            startup_timeout: Duration::from_secs(1800),
            drain_timeout: Duration::from_secs(60),
            hold_version_mismatch: false,
            allow_cidrs: Vec::new(),
            credentials: Vec::new(),
            default_api_key: None,
            breaker: BreakerConfig::default(),
        }
    }
}

/// A change in the fleet. `Added` is sent after the worker is routable-visible;
/// `Removed` after it left the snapshot (its in-flight requests drained or the drain
/// timed out); `Restarted` when a new process was detected behind a registered URL
/// (its KV cache is empty, its event sequence restarts at 0).
#[derive(Debug, Clone)]
pub enum RegistryEvent {
    Added(Arc<Worker>),
    Draining(Arc<Worker>),
    Removed(Arc<Worker>),
    Restarted(Arc<Worker>),
}

/// What `start_add_worker` accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddAccepted {
    pub id: WorkerId,
    /// UUID string reported as `worker_id`.
    pub public_id: String,
    /// The URL was already registered (nothing new was started).
    pub existing: bool,
}

/// Failed jobs kept for `GET /workers/{id}`.
const FAILED_JOBS_KEPT: usize = 64;

#[derive(Default)]
struct Jobs {
    pending: Vec<Job>,
    failed: VecDeque<Job>,
}

impl Jobs {
    /// Keeps `job` as failed with `err` (the latest per URL, at most [`FAILED_JOBS_KEPT`]).
    fn keep_failed(&mut self, job: Job, err: &AddWorkerError) {
        let mut failed = job;
        failed.status = JobStatus::Failed(err.to_string());
        failed.since = SystemTime::now();
        self.failed.retain(|j| j.url != failed.url);
        if self.failed.len() >= FAILED_JOBS_KEPT {
            self.failed.pop_front();
        }
        self.failed.push_back(failed);
    }
}

/// Shared state behind every `Registry` clone.
struct Inner {
    config: RegistryConfig,
    client: HttpClient,
    metrics: &'static FleetMetrics,
    workers: RwLock<Snapshot>,
    /// Serialises mutations of `workers` and `jobs`.
    write: Mutex<()>,
    jobs: Mutex<Jobs>,
    next_id: AtomicU32,
    events: broadcast::Sender<RegistryEvent>,
    watch: watch::Sender<Snapshot>,
    /// Where the health checker, registrations and drains run.
    tasks: Tasks,
    /// The routable workers, rebuilt after a gate or the fleet changed.
    routable: Routable,
}

/// The worker fleet. Clone freely; the health checker stops when the last clone is dropped.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("workers", &self.snapshot().len())
            .finish()
    }
}

/// Validates a client-given worker URL (`http://` assumed when no scheme is given):
/// canonical URL, host and credentials.
fn normalize_url(url: &str) -> Result<WorkerAddress, AddWorkerError> {
    parse_worker_address(url).map_err(|reason| AddWorkerError::InvalidUrl {
        // Never echo a password back (the URL did not parse, so strip by hand).
        url: match url.rsplit_once('@') {
            Some((_, rest)) => format!("***@{rest}"),
            None => url.to_string(),
        },
        reason,
    })
}

enum Begin {
    Existing(Arc<Worker>),
    New(Box<Job>),
}

impl Registry {
    /// Creates an empty registry and starts its health checker on `tasks` (as its
    /// registration and drain tasks later). Call inside a tokio runtime.
    pub fn new(config: RegistryConfig, tasks: &Tasks) -> Registry {
        let client = new_client(config.probe_timeout, config.idle_timeout);
        let (events, _) = broadcast::channel(1024);
        let (watch, _) = watch::channel(Arc::new(Vec::new()));
        let interval = config.health.interval;
        let inner = Arc::new(Inner {
            config,
            client,
            metrics: FleetMetrics::get(),
            workers: RwLock::new(Arc::new(Vec::new())),
            write: Mutex::new(()),
            jobs: Mutex::new(Jobs::default()),
            next_id: AtomicU32::new(1),
            events,
            watch,
            tasks: tasks.clone(),
            routable: Routable::default(),
        });
        health::spawn_checker(tasks, Arc::downgrade(&inner), interval);
        Registry { inner }
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &RegistryConfig {
        &self.inner.config
    }

    // ---- reads ----

    /// All registered workers (healthy or not, draining included), in id order (the order
    /// they were added).
    pub fn snapshot(&self) -> Snapshot {
        self.inner.snapshot()
    }

    /// Workers that may receive new requests now, in id order: a list kept between gate
    /// changes (`routable.rs`), so a request reads no worker's gates.
    pub fn routable(&self) -> Snapshot {
        self.inner.routable.get(|| self.snapshot())
    }

    /// Number of healthy registered workers.
    pub fn healthy_count(&self) -> usize {
        self.snapshot().iter().filter(|w| w.is_healthy()).count()
    }

    pub fn get(&self, id: WorkerId) -> Option<Arc<Worker>> {
        self.snapshot().iter().find(|w| w.id == id).cloned()
    }

    /// By URL (normalized: trailing slash and missing scheme tolerated).
    pub fn by_url(&self, url: &str) -> Option<Arc<Worker>> {
        let url = worker_url_key(url);
        self.snapshot().iter().find(|w| w.url == url).cloned()
    }

    /// By any key a client may use: the public UUID, the `w<N>` form, or a URL.
    pub fn lookup(&self, key: &str) -> Option<Arc<Worker>> {
        let snap = self.snapshot();
        if let Some(w) = snap.iter().find(|w| w.public_id == key) {
            return Some(w.clone());
        }
        if let Some(n) = key.strip_prefix('w').and_then(|n| n.parse::<u32>().ok()) {
            return snap.iter().find(|w| w.id == WorkerId(n)).cloned();
        }
        if key.contains(':') || key.contains('.') {
            return self.by_url(key);
        }
        None
    }

    /// The weight version every serving worker (registered, not draining, not awaiting
    /// refit) agrees on; `None` when there is none, one is unknown, or they disagree.
    pub fn fleet_weight_version(&self) -> Option<String> {
        fleet_version(&self.snapshot(), None)
    }

    /// Broadcast of fleet changes (a slow receiver may lag; use [`Self::watch`] to resync).
    pub fn subscribe(&self) -> broadcast::Receiver<RegistryEvent> {
        self.inner.events.subscribe()
    }

    /// The latest snapshot, notified on every membership change (never lags).
    pub fn watch(&self) -> watch::Receiver<Snapshot> {
        self.inner.watch.subscribe()
    }

    // ---- registration ----

    /// Probes `url` and registers it. A URL that is already registered returns its
    /// existing id (idempotent); one being probed gives `AlreadyPending`.
    pub async fn add_worker(
        &self,
        url: &str,
        spec: WorkerSpec,
    ) -> Result<WorkerId, AddWorkerError> {
        match self.begin_add(url, spec)? {
            Begin::Existing(w) => Ok(w.id),
            Begin::New(job) => self.inner.finish_add(*job).await.map(|w| w.id),
        }
    }

    /// Validates `url`, allocates its ids and probes/registers it in a background
    /// task; returns at once (the `202 Accepted` flow of `POST /workers`).
    pub fn start_add_worker(
        &self,
        url: &str,
        spec: WorkerSpec,
    ) -> Result<AddAccepted, AddWorkerError> {
        match self.begin_add(url, spec)? {
            Begin::Existing(w) => Ok(AddAccepted {
                id: w.id,
                public_id: w.public_id.clone(),
                existing: true,
            }),
            Begin::New(job) => {
                let accepted = AddAccepted {
                    id: job.id,
                    public_id: job.public_id.clone(),
                    existing: false,
                };
                let inner = self.inner.clone();
                self.inner.tasks.spawn("worker registration", async move {
                    let _ = inner.finish_add(*job).await;
                });
                Ok(accepted)
            }
        }
    }

    fn begin_add(&self, url: &str, mut spec: WorkerSpec) -> Result<Begin, AddWorkerError> {
        let WorkerAddress {
            url,
            host,
            credentials,
        } = normalize_url(url)?;
        check_worker_literal(&host, &self.inner.config.allow_cidrs).map_err(|reason| {
            AddWorkerError::InvalidUrl {
                url: url.clone(),
                reason,
            }
        })?;
        let credentials = credentials.or_else(|| {
            let known = &self.inner.config.credentials;
            known
                .iter()
                .find(|(u, _)| *u == url)
                .map(|(_, c)| c.clone())
        });
        if spec.api_key.is_none() && credentials.is_none() {
            spec.api_key.clone_from(&self.inner.config.default_api_key);
        }
        let _w = self.inner.write.lock();
        if let Some(existing) = self.snapshot().iter().find(|w| w.url == url) {
            if existing.is_draining() {
                return Err(AddWorkerError::Draining { url });
            }
            return Ok(Begin::Existing(existing.clone()));
        }
        let mut jobs = self.inner.jobs.lock();
        if let Some(job) = jobs.pending.iter().find(|j| j.url == url) {
            return Err(AddWorkerError::AlreadyPending {
                url,
                public_id: job.public_id.clone(),
            });
        }
        let job = Job {
            id: WorkerId(self.inner.next_id.fetch_add(1, Ordering::Relaxed)),
            public_id: uuid::Uuid::new_v4().to_string(),
            url,
            credentials,
            spec,
            status: JobStatus::Pending,
            since: SystemTime::now(),
            cancel: tokio_util::sync::CancellationToken::new(),
        };
        jobs.pending.push(job.clone());
        Ok(Begin::New(Box::new(job)))
    }

    // ---- removal ----

    /// Drains and removes the worker: not routable at once, removed when its in-flight
    /// count reaches zero (or `drain_timeout` passes). Also cancels a pending
    /// registration with that id. Returns the worker if one was registered.
    pub async fn remove_by_id(&self, id: WorkerId) -> Option<Arc<Worker>> {
        self.inner.cancel_job(|j| j.id == id);
        let w = self.get(id)?;
        Some(self.inner.drain_and_remove(w).await)
    }

    /// Like [`Self::remove_by_id`], by URL.
    pub async fn remove_by_url(&self, url: &str) -> Option<Arc<Worker>> {
        let norm = worker_url_key(url);
        self.inner.cancel_job(|j| j.url == norm);
        let w = self.by_url(&norm)?;
        Some(self.inner.drain_and_remove(w).await)
    }

    /// Like [`Self::remove_by_id`] but returns at once (the drain runs in a task).
    pub fn start_remove_by_id(&self, id: WorkerId) -> Option<Arc<Worker>> {
        self.inner.cancel_job(|j| j.id == id);
        let w = self.get(id)?;
        Some(self.spawn_remove(w))
    }

    /// Like [`Self::remove_by_url`] but returns at once (the drain runs in a task).
    pub fn start_remove_by_url(&self, url: &str) -> Option<Arc<Worker>> {
        let norm = worker_url_key(url);
        self.inner.cancel_job(|j| j.url == norm);
        let w = self.by_url(&norm)?;
        Some(self.spawn_remove(w))
    }

    /// Cancels a pending registration by public id, `w<N>` or URL; true if one was pending.
    pub fn cancel_pending(&self, key: &str) -> bool {
        let norm = worker_url_key(key);
        let n = key.strip_prefix('w').and_then(|n| n.parse::<u32>().ok());
        self.inner
            .cancel_job(|j| j.public_id == key || j.url == norm || Some(j.id.0) == n)
    }

    fn spawn_remove(&self, w: Arc<Worker>) -> Arc<Worker> {
        self.inner.mark_draining(&w);
        let inner = self.inner.clone();
        let worker = w.clone();
        self.inner.tasks.spawn("worker drain", async move {
            inner.drain_and_remove(worker).await;
        });
        w
    }

    // ---- health and restarts ----

    /// Runs one round of health checks now (what the periodic task does each interval).
    pub async fn check_health_now(&self) {
        health::check_round(&*self.inner).await;
    }

    /// Reports that a worker restarted (e.g. its KV event sequence went back to 0):
    /// bumps its incarnation, re-reads its info and emits `Restarted`.
    pub async fn note_restart(&self, id: WorkerId) {
        if let Some(w) = self.get(id) {
            self.inner.handle_restart(&w).await;
        }
    }

    // ---- JSON views ----

    /// `GET /workers`: `{"workers":[...],"total":n,"stats":{...}}` of registered workers
    /// only (clients such as miles fan out to every listed URL, so registrations that are
    /// pending or failed are shown by `GET /workers/{id}` instead).
    pub fn workers_json(&self) -> Value {
        views::workers_json(&self.snapshot())
    }

    /// `GET /workers/{key}`: a registered worker, or a pending/failed registration.
    pub fn worker_json(&self, key: &str) -> Option<Value> {
        if let Some(w) = self.lookup(key) {
            return Some(views::worker_json(&w));
        }
        let norm = worker_url_key(key);
        let jobs = self.inner.jobs_view();
        jobs.iter()
            .rev()
            .find(|j| j.public_id == key || j.url == norm || format!("{}", j.id) == key)
            .map(views::job_json)
    }

    /// `GET /list_workers`: `{"urls":[...]}`.
    pub fn list_workers_json(&self) -> Value {
        views::list_workers_json(&self.snapshot())
    }
}

/// The version all serving workers (except `skip`) agree on, if any.
fn fleet_version(workers: &[Arc<Worker>], skip: Option<WorkerId>) -> Option<String> {
    let mut agreed: Option<String> = None;
    for w in workers
        .iter()
        .filter(|w| Some(w.id) != skip && !w.is_draining() && !w.is_awaiting_refit())
    {
        let v = w.weight_version()?;
        match &agreed {
            None => agreed = Some(v),
            Some(a) if *a == v => {}
            Some(_) => return None,
        }
    }
    agreed
}

impl Inner {
    /// With an allow-list, resolves a hostname and checks every address it names.
    async fn check_resolved(&self, url: &str) -> Result<(), AddWorkerError> {
        let Ok(addr) = normalize_url(url) else {
            return Ok(());
        };
        let port = url::Url::parse(&addr.url)
            .ok()
            .and_then(|u| u.port_or_known_default())
            .unwrap_or(80);
        check_worker_host(&addr.host, port, &self.config.allow_cidrs)
            .await
            .map_err(|reason| AddWorkerError::InvalidUrl {
                url: addr.url,
                reason,
            })
    }

    fn snapshot(&self) -> Snapshot {
        self.workers.read().clone()
    }

    /// Replaces the snapshot (caller holds `write`), in id order: the KV decision finds a
    /// unit's worker among its candidates by id (`routing/kv/read.rs` `position_of`), and
    /// registrations finish in whatever order their probes answer.
    fn publish(&self, mut next: Vec<Arc<Worker>>) {
        next.sort_unstable_by_key(|w| w.id);
        let next = Arc::new(next);
        self.metrics.workers_total.set(next.len() as i64);
        *self.workers.write() = next.clone();
        self.routable.gates().bump();
        self.watch.send_replace(next);
    }

    fn emit(&self, ev: RegistryEvent) {
        // No receivers is fine.
        let _ = self.events.send(ev);
    }

    fn jobs_view(&self) -> Vec<Job> {
        let jobs = self.jobs.lock();
        jobs.pending
            .iter()
            .chain(jobs.failed.iter())
            .cloned()
            .collect()
    }

    /// Removes a pending job matching `pred`; true if one was removed.
    fn cancel_job(&self, pred: impl Fn(&Job) -> bool) -> bool {
        let mut jobs = self.jobs.lock();
        let before = jobs.pending.len();
        jobs.pending.retain(|j| {
            let cancel = pred(j);
            if cancel {
                j.cancel.cancel();
            }
            !cancel
        });
        before != jobs.pending.len()
    }

    /// Probes a pending job and registers (or fails) it.
    async fn finish_add(self: &Arc<Self>, job: Job) -> Result<Arc<Worker>, AddWorkerError> {
        let probed = self.probe_job(&job).await;
        let _w = self.write.lock();
        let mut jobs = self.jobs.lock();
        let Some(pos) = jobs.pending.iter().position(|j| j.id == job.id) else {
            return Err(AddWorkerError::Cancelled { url: job.url });
        };
        let job = jobs.pending.remove(pos);
        match probed {
            Ok(info) => {
                let worker = self.new_worker(job, info);
                let snap = self.snapshot();
                self.hold_if_behind(&snap, &worker);
                let mut next = snap.as_ref().clone();
                next.push(worker.clone());
                self.publish(next);
                jobs.failed.retain(|j| j.url != worker.url);
                drop(jobs);
                self.metrics.registration(true);
                tracing::info!(
                    worker = %worker.url, id = %worker.id, public_id = %worker.public_id,
                    page_size = worker.info.page_size, dp_size = worker.info.dp_size,
                    kv_events = worker.info.kv_events_enabled(),
                    weight_version = ?worker.info.weight_version,
                    "worker registered"
                );
                self.emit(RegistryEvent::Added(worker.clone()));
                Ok(worker)
            }
            Err(err) => {
                self.metrics.registration(false);
                if !matches!(err, AddWorkerError::PageSizeMismatch { .. }) {
                    // Page-size refusals were already logged at error level.
                    tracing::warn!(worker = %job.url, error = %err, "worker registration failed");
                }
                jobs.keep_failed(job, &err);
                Err(err)
            }
        }
    }

    /// Checks that the job's URL resolves to an allowed address, then probes the worker
    /// (unless the job is cancelled first).
    async fn probe_job(&self, job: &Job) -> Result<WorkerInfo, AddWorkerError> {
        let timeouts = ProbeTimeouts {
            request: self.config.probe_timeout,
            startup: self.config.startup_timeout,
        };
        self.check_resolved(&job.url).await?;
        let auth = authorization(job.spec.api_key.as_deref(), job.credentials.as_ref());
        let probe = probe_worker(
            &self.client,
            &job.url,
            auth.as_deref(),
            self.config.page_size,
            timeouts,
        );
        tokio::select! {
            r = probe => r,
            () = job.cancel.cancelled() => Err(AddWorkerError::Cancelled {
                url: job.url.clone(),
            }),
        }
    }

    /// The worker of a probed job: healthy by the configured thresholds, its gauges and
    /// circuit breaker attached.
    fn new_worker(&self, job: Job, info: WorkerInfo) -> Arc<Worker> {
        let host = normalize_url(&job.url).map(|a| a.host).unwrap_or_default();
        let health = HealthState::new(
            self.config.health.failure_threshold,
            self.config.health.success_threshold,
        );
        Arc::new(Worker::from_parts(NewWorker {
            id: job.id,
            public_id: job.public_id,
            url: job.url.clone(),
            host,
            credentials: job.credentials,
            spec: job.spec,
            info,
            health,
            gauges: self.metrics.worker_gauges(&job.url),
            circuit: (self.config.breaker, self.metrics.circuit_gauge(&job.url)),
            gates: self.routable.gates().clone(),
        }))
    }

    /// With `hold_version_mismatch`, marks `w` awaiting refit when its version differs
    /// from the one the rest of the fleet agrees on.
    fn hold_if_behind(&self, fleet: &[Arc<Worker>], w: &Arc<Worker>) {
        if !self.config.hold_version_mismatch {
            return;
        }
        let Some(fleet_version) = fleet_version(fleet, Some(w.id)) else {
            return;
        };
        if w.weight_version().as_deref() != Some(fleet_version.as_str()) {
            tracing::warn!(worker = %w.url, worker_version = ?w.weight_version(), %fleet_version,
                "worker's weight version differs from the fleet's: held out of routing until refit");
            w.set_awaiting_refit(true);
        }
    }

    fn mark_draining(&self, w: &Arc<Worker>) {
        if w.set_draining() {
            tracing::info!(worker = %w.url, in_flight = w.in_flight(), "worker draining for removal");
            self.emit(RegistryEvent::Draining(w.clone()));
        }
    }

    /// Marks draining, waits for in-flight requests (bounded), removes, emits `Removed`.
    async fn drain_and_remove(&self, w: Arc<Worker>) -> Arc<Worker> {
        self.mark_draining(&w);
        if tokio::time::timeout(self.config.drain_timeout, w.wait_idle())
            .await
            .is_err()
        {
            tracing::warn!(
                worker = %w.url, in_flight = w.in_flight(), timeout = ?self.config.drain_timeout,
                "drain timed out; removing the worker with requests still in flight"
            );
        }
        let removed = {
            let _w = self.write.lock();
            let snap = self.snapshot();
            if snap.iter().any(|x| x.id == w.id) {
                self.publish(snap.iter().filter(|x| x.id != w.id).cloned().collect());
                true
            } else {
                false
            }
        };
        if removed {
            self.metrics.forget_worker(&w.url);
            tracing::info!(worker = %w.url, id = %w.id, "worker removed");
            self.emit(RegistryEvent::Removed(w.clone()));
        }
        w
    }

    /// A new process answers behind a registered URL: bump the incarnation, re-read
    /// its info (page size re-checked, weight version refreshed), emit `Restarted`.
    async fn handle_restart(&self, w: &Arc<Worker>) {
        let incarnation = w.bump_incarnation();
        self.metrics.restarts.inc();
        match read_info(
            &self.client,
            &w.url,
            w.authorization(),
            self.config.page_size,
            self.config.probe_timeout,
        )
        .await
        {
            Ok(info) => {
                w.set_incompatible(false);
                let _ = w.swap_incarnation_marker(info.incarnation.clone());
                if info.dp_size != w.info.dp_size {
                    tracing::warn!(worker = %w.url, old = w.info.dp_size, new = info.dp_size,
                        "worker restarted with another dp_size; re-register it to route to the new ranks");
                }
                w.set_weight_version(info.weight_version.clone());
                self.hold_if_behind(&self.snapshot(), w);
            }
            Err(AddWorkerError::PageSizeMismatch { .. }) => w.set_incompatible(true),
            Err(e) => {
                tracing::warn!(worker = %w.url, error = %e, "could not re-read info after restart")
            }
        }
        tracing::info!(worker = %w.url, incarnation, weight_version = ?w.weight_version(), "worker restarted");
        self.emit(RegistryEvent::Restarted(w.clone()));
    }
}

impl CheckedFleet for Inner {
    fn workers(&self) -> Snapshot {
        self.snapshot()
    }

    fn health_config(&self) -> &HealthConfig {
        &self.config.health
    }

    fn client(&self) -> &HttpClient {
        &self.client
    }

    fn metrics(&self) -> &FleetMetrics {
        self.metrics
    }

    fn restarted(&self, worker: &Arc<Worker>) -> impl std::future::Future<Output = ()> + Send {
        self.handle_restart(worker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_normalized() {
        let a = normalize_url("http://127.0.0.1:30000/").expect("ok");
        assert_eq!(
            (a.url.as_str(), a.host.as_str()),
            ("http://127.0.0.1:30000", "127.0.0.1")
        );
        assert_eq!(worker_url_key("127.0.0.1:30000"), "http://127.0.0.1:30000");
        let a = normalize_url("http://[::1]:5/x/").expect("ok");
        assert_eq!(
            (a.url.as_str(), a.host.as_str()),
            ("http://[::1]:5/x", "::1")
        );
        for bad in ["", "https://h:1", "http://h:1/?a=b", "http://:1", "ftp://h"] {
            assert!(
                matches!(normalize_url(bad), Err(AddWorkerError::InvalidUrl { .. })),
                "{bad:?} must be refused"
            );
        }
    }

    #[test]
    fn fleet_version_needs_agreement() {
        use crate::workers::worker::test_worker;
        let a = Arc::new(test_worker(1, "http://a"));
        let b = Arc::new(test_worker(2, "http://b"));
        a.set_weight_version(Some("v1".into()));
        b.set_weight_version(Some("v1".into()));
        let fleet = vec![a.clone(), b.clone()];
        assert_eq!(fleet_version(&fleet, None).as_deref(), Some("v1"));
        b.set_weight_version(Some("v2".into()));
        assert_eq!(fleet_version(&fleet, None), None, "disagreement");
        assert_eq!(fleet_version(&fleet, Some(b.id)).as_deref(), Some("v1"));
        b.set_awaiting_refit(true);
        assert_eq!(
            fleet_version(&fleet, None).as_deref(),
            Some("v1"),
            "held workers do not vote"
        );
        b.set_weight_version(None);
        b.set_awaiting_refit(false);
        assert_eq!(fleet_version(&fleet, None), None, "unknown version");
        assert_eq!(fleet_version(&[], None), None);
    }

    #[tokio::test]
    async fn the_snapshot_is_in_id_order_whatever_order_registrations_finish_in() {
        let reg = Registry::new(RegistryConfig::default(), &Tasks::new());
        let w = |id| {
            Arc::new(super::super::worker::test_worker(
                id,
                &format!("http://h{id}:1"),
            ))
        };
        let _guard = reg.inner.write.lock();
        // Probes answered 3, 1, 2: each registration appends to the snapshot it read.
        let mut next = Vec::new();
        for id in [3, 1, 2] {
            next.push(w(id));
            reg.inner.publish(next.clone());
        }
        let ids: Vec<u32> = reg.snapshot().iter().map(|w| w.id.0).collect();
        assert_eq!(ids, [1, 2, 3]);
    }

    #[tokio::test]
    async fn dropping_the_last_clone_frees_the_registry() {
        let reg = Registry::new(RegistryConfig::default(), &Tasks::new());
        let clone = reg.clone();
        let weak = Arc::downgrade(&reg.inner);
        tokio::task::yield_now().await; // let the checker task start and park on its timer
        drop(reg);
        assert!(weak.upgrade().is_some(), "a clone is alive");
        drop(clone);
        assert!(
            weak.upgrade().is_none(),
            "the health checker holds only a weak reference"
        );
    }

    #[tokio::test]
    async fn invalid_url_is_refused_without_probing() {
        let reg = Registry::new(RegistryConfig::default(), &Tasks::new());
        let err = reg.add_worker("https://x:1", WorkerSpec::default()).await;
        assert_eq!(err.map_err(|e| e.status_code()), Err(400));
        assert!(reg.snapshot().is_empty());
    }
}
