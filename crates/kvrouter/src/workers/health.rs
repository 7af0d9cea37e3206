//! The periodic health checker: each round probes every registered worker's health
//! endpoint (and optionally polls `/v1/loads`, or `/get_load` on older SGLang) and feeds the verdict into the
//! worker's [`HealthState`]. A new process behind a worker's URL is noticed either by a
//! refused connect followed by a success, or (for workers whose `/server_info` carries a
//! launch marker, SGLang 0.5.23) by a changed marker read on every round. It sees the fleet only through [`CheckedFleet`], which
//! the registry implements, so this module never names the registry.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;

use super::http::{http_get, http_get_json, HttpClient, HttpGetError};
use super::info::incarnation_marker;
use super::load::parse_load;
use super::metrics::FleetMetrics;
use super::worker::Worker;

pub(crate) use super::health_state::{HealthConfig, HealthState, HealthTransition};

/// What the checker needs from the fleet it checks (implemented by the registry).
pub(super) trait CheckedFleet: Send + Sync + 'static {
    /// The workers registered now.
    fn workers(&self) -> Arc<Vec<Arc<Worker>>>;
    /// Check settings.
    fn health_config(&self) -> &HealthConfig;
    /// The client checks are sent with.
    fn client(&self) -> &HttpClient;
    /// Where check outcomes are counted.
    fn metrics(&self) -> &FleetMetrics;
    /// A new process answers behind `worker`'s URL (nothing was listening before).
    fn restarted(&self, worker: &Arc<Worker>) -> impl Future<Output = ()> + Send;
    /// GETs a worker's health endpoint: the client's request (the tests answer without a
    /// socket, which a paused clock cannot wait on).
    fn health_get<'a>(
        &'a self,
        url: &'a str,
        authorization: Option<&'a str>,
        timeout: Duration,
    ) -> impl Future<Output = Result<(u16, Bytes), HttpGetError>> + Send + 'a {
        http_get(self.client(), url, authorization, timeout)
    }
}

/// Spawns the checker: one round every `interval`, all workers concurrently. The task
/// holds only a weak reference and ends when the fleet is dropped.
pub(super) fn spawn_checker<F: CheckedFleet>(
    tasks: &crate::tasks::Tasks,
    fleet: Weak<F>,
    interval: Duration,
) {
    tasks.spawn("health checker", async move {
        let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(10)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await; // the first tick fires at once; workers were just probed
        loop {
            ticker.tick().await;
            let Some(fleet) = fleet.upgrade() else { break };
            check_round(&*fleet).await;
        }
    });
}

/// Checks every registered worker once, concurrently.
pub(super) async fn check_round<F: CheckedFleet>(fleet: &F) {
    let workers = fleet.workers();
    let checks = workers
        .iter()
        .filter(|w| !w.spec.disable_health_check)
        .map(|w| check_worker(fleet, w));
    futures::future::join_all(checks).await;
}

/// One health check (and optional load poll) of one worker.
async fn check_worker<F: CheckedFleet>(fleet: &F, worker: &Arc<Worker>) {
    let cfg = fleet.health_config();
    let url = format!("{}{}", worker.url, cfg.endpoint);
    let result = fleet
        .health_get(&url, worker.authorization(), cfg.timeout)
        .await;
    let ok = matches!(result, Ok((status, _)) if (200..300).contains(&status));
    fleet.metrics().health_check(ok);
    if ok {
        if worker.take_connect_failure() {
            // Nothing was listening and now something is: a new process.
            fleet.restarted(worker).await;
        } else if worker.incarnation_marker().is_none() {
            // No launch marker to compare: answering without a refused connect is all we know.
            worker.confirm();
        } else {
            match relaunched(fleet, worker).await {
                // Down and up again between two rounds: the launch marker changed.
                Some(true) => fleet.restarted(worker).await,
                // The same process answers: event sources that reconnected may trust it again.
                Some(false) => worker.confirm(),
                None => {}
            }
        }
        apply_success(worker);
        if cfg.poll_load {
            poll_load(fleet, worker).await;
        }
    } else {
        match &result {
            Err(e) if e.is_connect() => worker.note_connect_failure(),
            _ => {}
        }
        let reason = match &result {
            Ok((status, _)) => format!("HTTP status {status}"),
            Err(e) => e.to_string(),
        };
        tracing::debug!(worker = %worker.url, %reason, "health check failed");
        apply_failure(worker);
    }
}

fn apply_success(w: &Arc<Worker>) {
    if w.record_success() == Some(HealthTransition::BecameHealthy) {
        tracing::info!(worker = %w.url, "worker healthy again");
    }
}

fn apply_failure(w: &Arc<Worker>) {
    // record_failure logs the transition itself.
    let _ = w.record_failure();
}

/// Reads `/server_info` and compares its launch marker (`info::incarnation_marker`) with the
/// one known: true when it changed (the marker is updated). A worker restarted inside one
/// health interval answers every check, so this is the only sign of its new process that
/// does not wait for its KV events. Unreadable answers are no restart and no confirmation
/// (`None`).
async fn relaunched<F: CheckedFleet>(fleet: &F, worker: &Arc<Worker>) -> Option<bool> {
    let url = format!("{}/server_info", worker.url);
    let timeout = fleet.health_config().timeout;
    match http_get_json(fleet.client(), &url, worker.authorization(), timeout).await {
        Ok(v) => {
            let marker = incarnation_marker(&v);
            let known = marker.is_some();
            let changed = worker.swap_incarnation_marker(marker);
            known.then_some(changed)
        }
        Err(e) => {
            tracing::debug!(worker = %worker.url, error = %e, "server info unreadable; launch marker not checked");
            None
        }
    }
}

/// Reads the worker's load route (`/v1/loads`, else `/get_load` on a 404, remembered per
/// worker) and stores the summed token load (-1 when unreadable).
async fn poll_load<F: CheckedFleet>(fleet: &F, worker: &Arc<Worker>) {
    let timeout = fleet.health_config().timeout;
    let get = |path: &'static str| {
        let url = format!("{}{path}", worker.url);
        async move { http_get_json(fleet.client(), &url, worker.authorization(), timeout).await }
    };
    let first = worker.load_route.path();
    let answer = match get(first).await {
        Err(HttpGetError::Status(404)) => get(worker.load_route.missing(first)).await,
        other => other,
    };
    worker.set_reported_load(answer.ok().and_then(|v| parse_load(&v)));
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    use tokio::time::{sleep_until, Instant};

    use super::*;
    use crate::workers::{WorkerId, WorkerInfo};

    /// One worker whose health endpoint answers 200 while `up`, else 503 (no socket).
    struct Fleet {
        workers: Arc<Vec<Arc<Worker>>>,
        config: HealthConfig,
        client: HttpClient,
        up: AtomicBool,
        checks: AtomicU32,
    }

    impl CheckedFleet for Fleet {
        fn workers(&self) -> Arc<Vec<Arc<Worker>>> {
            self.workers.clone()
        }
        fn health_config(&self) -> &HealthConfig {
            &self.config
        }
        fn client(&self) -> &HttpClient {
            &self.client
        }
        fn metrics(&self) -> &FleetMetrics {
            FleetMetrics::get()
        }
        async fn restarted(&self, _: &Arc<Worker>) {}
        fn health_get<'a>(
            &'a self,
            _: &'a str,
            _: Option<&'a str>,
            _: Duration,
        ) -> impl Future<Output = Result<(u16, Bytes), HttpGetError>> + Send + 'a {
            self.checks.fetch_add(1, Ordering::Relaxed);
            let status = if self.up.load(Ordering::Relaxed) {
                200
            } else {
                503
            };
            std::future::ready(Ok((status, Bytes::new())))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_worker_goes_unhealthy_after_its_failed_rounds_and_recovers() {
        // The worker's thresholds are the defaults: 3 failures, 2 successes.
        let config = HealthConfig {
            interval: Duration::from_secs(10),
            ..HealthConfig::default()
        };
        let worker = Arc::new(Worker::new(
            WorkerId(1),
            "http://w:1",
            WorkerInfo::default(),
        ));
        let fleet = Arc::new(Fleet {
            workers: Arc::new(vec![worker.clone()]),
            config,
            client: super::super::http::new_client(Duration::from_secs(1), Duration::from_secs(1)),
            up: AtomicBool::new(false),
            checks: AtomicU32::new(0),
        });
        let tasks = crate::tasks::Tasks::new();
        let start = Instant::now();
        spawn_checker(&tasks, Arc::downgrade(&fleet), Duration::from_secs(10));
        let at = |secs: f64| sleep_until(start + Duration::from_secs_f64(secs));
        let checks = || fleet.checks.load(Ordering::Relaxed);
        // Rounds at 10 and 20 s (none at 0: the worker was just probed): two failures.
        at(29.5).await;
        assert_eq!(checks(), 2);
        assert!(worker.is_healthy());
        assert_eq!(worker.health.consecutive_failures(), 2);
        // The third, at 30 s, makes it unhealthy.
        at(30.5).await;
        assert_eq!(checks(), 3);
        assert!(!worker.is_healthy());
        // It answers again: one success (40 s) is not enough, the second (50 s) is.
        fleet.up.store(true, Ordering::Relaxed);
        at(49.5).await;
        assert_eq!(checks(), 4);
        assert!(!worker.is_healthy());
        at(50.5).await;
        assert_eq!(checks(), 5);
        assert!(worker.is_healthy());
    }
}
