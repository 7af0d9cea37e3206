//! Health verdicts: the consecutive-success/failure state machine each worker
//! carries (`HealthState`), its thresholds and check settings (`HealthConfig`, built from
//! the validated options `HealthSettings`), and the transitions it reports. A leaf: the checker task lives in `health`.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

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

/// The validated health options (`--health-check-interval-secs`, `--health-check-timeout-secs`,
/// `--health-failure-threshold`, `--health-success-threshold`, `--health-check-endpoint`,
/// `--worker-startup-timeout-secs`), as `config` builds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthSettings {
    /// Time between two rounds of checks.
    pub interval: Duration,
    /// Deadline of one check (and of each registration probe call).
    pub timeout: Duration,
    /// Consecutive failures that make a healthy worker unhealthy.
    pub failure_threshold: u32,
    /// Consecutive successes that make an unhealthy worker healthy again.
    pub success_threshold: u32,
    /// Path probed on each worker.
    pub endpoint: String,
    /// How long a registering worker may take to pass its first probe.
    pub startup_timeout: Duration,
}

impl HealthSettings {
    /// The periodic checks these settings ask for.
    pub fn checks(&self) -> HealthConfig {
        HealthConfig {
            interval: self.interval,
            timeout: self.timeout,
            failure_threshold: self.failure_threshold,
            success_threshold: self.success_threshold,
            endpoint: self.endpoint.clone(),
            ..HealthConfig::default()
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
pub(crate) struct HealthState {
    healthy: AtomicBool,
    consecutive_failures: AtomicU32,
    consecutive_successes: AtomicU32,
    failure_threshold: u32,
    success_threshold: u32,
}

impl HealthState {
    /// A healthy state with the given thresholds (each at least 1).
    pub(crate) fn new(failure_threshold: u32, success_threshold: u32) -> HealthState {
        HealthState {
            healthy: AtomicBool::new(true),
            consecutive_failures: AtomicU32::new(0),
            consecutive_successes: AtomicU32::new(0),
            failure_threshold: failure_threshold.max(1),
            success_threshold: success_threshold.max(1),
        }
    }

    pub(crate) fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    pub(crate) fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures.load(Ordering::Relaxed)
    }

    pub(crate) fn consecutive_successes(&self) -> u32 {
        self.consecutive_successes.load(Ordering::Relaxed)
    }

    /// Records one success; returns the transition if this one made the worker healthy.
    /// Cheap on the hot path: a healthy worker without failures only does loads.
    pub(crate) fn record_success(&self) -> Option<HealthTransition> {
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
    pub(crate) fn record_failure(&self) -> Option<HealthTransition> {
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
    #[cfg(test)]
    pub(crate) fn force(&self, healthy: bool) -> Option<HealthTransition> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
