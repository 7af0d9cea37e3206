//! Health: the consecutive-success/failure state machine each worker carries
//! (`HealthState`), its thresholds (`HealthConfig`), and the periodic checker task
//! that probes every registered worker and optionally polls its load.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::Value;

use super::http::{http_get, http_get_json};
use super::registry::Inner;
use super::worker::Worker;

/// Periodic health-check settings (router-global, as in sgl-router).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthConfig {
    /// Time between two rounds of checks.
    pub interval: Duration,
    /// Deadline of one check.
    pub timeout: Duration,
    /// Consecutive failures that make a healthy worker unhealthy.
    pub failure_threshold: u32,
    /// Consecutive successes that make an unhealthy worker healthy again.
    pub success_threshold: u32,
    /// Path probed on each worker.
    pub endpoint: String,
    /// Also poll `/get_load` each round and keep the reported token load.
    pub poll_load: bool,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(5),
            failure_threshold: 3,
            success_threshold: 2,
            endpoint: "/health".to_string(),
            poll_load: false,
        }
    }
}

/// A change of a worker's health verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthTransition {
    BecameHealthy,
    BecameUnhealthy,
}

/// Lock-free health verdict with consecutive counters. Starts healthy (a worker is
/// registered only after a successful probe).
#[derive(Debug)]
pub struct HealthState {
    healthy: AtomicBool,
    consecutive_failures: AtomicU32,
    consecutive_successes: AtomicU32,
    failure_threshold: u32,
    success_threshold: u32,
}

impl HealthState {
    /// A healthy state with the given thresholds (each at least 1).
    pub fn new(failure_threshold: u32, success_threshold: u32) -> HealthState {
        HealthState {
            healthy: AtomicBool::new(true),
            consecutive_failures: AtomicU32::new(0),
            consecutive_successes: AtomicU32::new(0),
            failure_threshold: failure_threshold.max(1),
            success_threshold: success_threshold.max(1),
        }
    }

    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures.load(Ordering::Relaxed)
    }

    pub fn consecutive_successes(&self) -> u32 {
        self.consecutive_successes.load(Ordering::Relaxed)
    }

    /// Records one success; returns the transition if this one made the worker healthy.
    /// Cheap on the hot path: a healthy worker without failures only does loads.
    pub fn record_success(&self) -> Option<HealthTransition> {
        if self.consecutive_failures.load(Ordering::Relaxed) != 0 {
            self.consecutive_failures.store(0, Ordering::Relaxed);
        }
        if self.is_healthy() {
            return None;
        }
        let n = saturating_inc(&self.consecutive_successes);
        if n >= self.success_threshold && !self.healthy.swap(true, Ordering::AcqRel) {
            self.consecutive_successes.store(0, Ordering::Relaxed);
            return Some(HealthTransition::BecameHealthy);
        }
        None
    }

    /// Records one failure; returns the transition if this one made the worker unhealthy.
    pub fn record_failure(&self) -> Option<HealthTransition> {
        if self.consecutive_successes.load(Ordering::Relaxed) != 0 {
            self.consecutive_successes.store(0, Ordering::Relaxed);
        }
        let n = saturating_inc(&self.consecutive_failures);
        if n >= self.failure_threshold && self.healthy.swap(false, Ordering::AcqRel) {
            return Some(HealthTransition::BecameUnhealthy);
        }
        None
    }

    /// Forces a verdict (administrative override); returns the transition if any.
    pub fn force(&self, healthy: bool) -> Option<HealthTransition> {
        self.consecutive_failures.store(0, Ordering::Relaxed);
        self.consecutive_successes.store(0, Ordering::Relaxed);
        match (self.healthy.swap(healthy, Ordering::AcqRel), healthy) {
            (false, true) => Some(HealthTransition::BecameHealthy),
            (true, false) => Some(HealthTransition::BecameUnhealthy),
            _ => None,
        }
    }
}

fn saturating_inc(a: &AtomicU32) -> u32 {
    // A plain add could wrap after 2^32 failures; clamp instead.
    let prev = a
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
            Some(c.saturating_add(1))
        })
        .unwrap_or(u32::MAX);
    prev.saturating_add(1)
}

/// Spawns the checker: one round every `interval`, all workers concurrently. The task
/// holds only a weak reference and ends when the registry is dropped.
pub(super) fn spawn_checker(inner: Weak<Inner>, interval: Duration) {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(10)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await; // the first tick fires at once; workers were just probed
        loop {
            ticker.tick().await;
            let Some(inner) = inner.upgrade() else { break };
            check_round(&inner).await;
        }
    });
}

/// Checks every registered worker once, concurrently.
pub(super) async fn check_round(inner: &Arc<Inner>) {
    let workers = inner.snapshot();
    let checks = workers
        .iter()
        .filter(|w| !w.spec.disable_health_check)
        .map(|w| check_worker(inner, w));
    futures::future::join_all(checks).await;
}

/// One health check (and optional load poll) of one worker.
async fn check_worker(inner: &Arc<Inner>, worker: &Arc<Worker>) {
    let cfg = &inner.config.health;
    let url = format!("{}{}", worker.url, cfg.endpoint);
    let result = http_get(
        &inner.client,
        &url,
        worker.spec.api_key.as_deref(),
        cfg.timeout,
    )
    .await;
    let ok = matches!(result, Ok((status, _)) if (200..300).contains(&status));
    inner.metrics.health_check(ok);
    if ok {
        if worker.take_connect_failure() {
            // Nothing was listening and now something is: a new process.
            inner.handle_restart(worker).await;
        }
        inner.apply_success(worker);
        if cfg.poll_load {
            poll_load(inner, worker).await;
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
        inner.apply_failure(worker);
    }
}

/// Reads `/get_load` and stores the summed token load (-1 when unreadable).
async fn poll_load(inner: &Arc<Inner>, worker: &Arc<Worker>) {
    let url = format!("{}/get_load", worker.url);
    let load = http_get_json(
        &inner.client,
        &url,
        worker.spec.api_key.as_deref(),
        inner.config.health.timeout,
    )
    .await
    .ok()
    .and_then(|v| parse_load(&v));
    worker.set_reported_load(load);
}

/// Token load from a `/get_load` body: E1 `{"load": n}` or E2/E3 a per-DP list of
/// `{"num_tokens": n, ...}` (summed); also a `/v1/loads` body (`{"loads": [...]}` with
/// `num_used_tokens`).
pub fn parse_load(v: &Value) -> Option<i64> {
    match v {
        Value::Object(o) => match o.get("loads") {
            Some(list @ Value::Array(_)) => parse_load(list),
            _ => o.get("load").and_then(Value::as_i64),
        },
        Value::Array(items) => items.iter().try_fold(0i64, |acc, it| {
            let n = it
                .get("num_tokens")
                .or_else(|| it.get("num_used_tokens"))
                .and_then(Value::as_i64)?;
            Some(acc.saturating_add(n))
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn failure_threshold_then_success_threshold() {
        let h = HealthState::new(3, 2);
        assert!(h.is_healthy());
        assert_eq!(h.record_failure(), None);
        assert_eq!(h.record_failure(), None);
        assert_eq!(h.record_failure(), Some(HealthTransition::BecameUnhealthy));
        assert!(!h.is_healthy());
        assert_eq!(h.record_failure(), None, "only one transition");
        assert_eq!(h.record_success(), None);
        assert!(!h.is_healthy());
        assert_eq!(h.record_success(), Some(HealthTransition::BecameHealthy));
        assert!(h.is_healthy());
    }

    #[test]
    fn streaks_must_be_consecutive() {
        let h = HealthState::new(2, 2);
        h.record_failure();
        h.record_success();
        assert_eq!(
            h.record_failure(),
            None,
            "a success reset the failure streak"
        );
        assert_eq!(h.record_failure(), Some(HealthTransition::BecameUnhealthy));
        h.record_success();
        h.record_failure();
        assert_eq!(
            h.record_success(),
            None,
            "a failure reset the success streak"
        );
        assert_eq!(h.record_success(), Some(HealthTransition::BecameHealthy));
        assert_eq!(h.consecutive_successes(), 0);
    }

    #[test]
    fn zero_thresholds_act_as_one_and_force_overrides() {
        let h = HealthState::new(0, 0);
        assert_eq!(h.record_failure(), Some(HealthTransition::BecameUnhealthy));
        assert_eq!(h.record_success(), Some(HealthTransition::BecameHealthy));
        assert_eq!(h.force(false), Some(HealthTransition::BecameUnhealthy));
        assert_eq!(h.force(false), None);
    }

    #[test]
    fn load_bodies_of_all_generations() {
        assert_eq!(parse_load(&json!({"load": 42})), Some(42));
        assert_eq!(
            parse_load(
                &json!([{"dp_rank":0,"num_reqs":1,"num_waiting_reqs":0,"num_tokens":10},
                               {"dp_rank":1,"num_reqs":2,"num_waiting_reqs":0,"num_tokens":5}])
            ),
            Some(15)
        );
        assert_eq!(
            parse_load(&json!({"timestamp":"x","loads":[{"dp_rank":0,"num_used_tokens":7}]})),
            Some(7)
        );
        assert_eq!(parse_load(&json!([{"dp_rank":0}])), None);
        assert_eq!(parse_load(&json!("x")), None);
    }
}
