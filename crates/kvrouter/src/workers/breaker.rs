//! The per-worker circuit breaker (sgl-router's `--cb-*`): data-plane attempt outcomes open a
//! worker's circuit after `failure_threshold` consecutive failures; an open circuit takes no
//! requests until `timeout` has passed, then turns half-open (checked lazily, when routing
//! asks), lets requests through as trials, and closes after `success_threshold` consecutive
//! successes; a failure while half-open opens it again. The health checker is not involved:
//! health and circuit are two separate gates of `Worker::is_routable`.
//!
//! Reads on the routing path are one atomic load (plus a clock read while open); transitions
//! take a small lock.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// Circuit-breaker settings, shared by every worker of a registry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    /// Consecutive failures that open a closed circuit (`u32::MAX` when disabled).
    pub failure_threshold: u32,
    /// Consecutive half-open successes that close it.
    pub success_threshold: u32,
    /// How long an open circuit refuses requests.
    pub timeout: Duration,
    /// `--disable-circuit-breaker`: circuits never open.
    pub disabled: bool,
}

impl Default for BreakerConfig {
    /// sgl-router's defaults: 10 failures, 3 successes, 60 s.
    fn default() -> Self {
        BreakerConfig {
            failure_threshold: 10,
            success_threshold: 3,
            timeout: Duration::from_secs(60),
            disabled: false,
        }
    }
}

/// Where a circuit is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitState {
    /// Requests flow; failures are counted.
    Closed,
    /// No requests until the timeout has passed.
    Open,
    /// Requests flow as trials; successes are counted, one failure reopens.
    HalfOpen,
}

impl CircuitState {
    /// The `/workers` JSON spelling (sgl-router's `circuit_state`).
    pub fn as_str(self) -> &'static str {
        match self {
            CircuitState::Closed => "closed",
            CircuitState::Open => "open",
            CircuitState::HalfOpen => "half_open",
        }
    }

    /// The gauge value, as SMG's `smg_worker_cb_state`: 0 closed, 1 open, 2 half-open.
    pub fn gauge(self) -> i64 {
        match self {
            CircuitState::Closed => 0,
            CircuitState::Open => 1,
            CircuitState::HalfOpen => 2,
        }
    }

    fn from_u8(v: u8) -> CircuitState {
        match v {
            1 => CircuitState::Open,
            2 => CircuitState::HalfOpen,
            _ => CircuitState::Closed,
        }
    }
}

/// A state change, returned so the caller can log and count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Transition {
    pub from: CircuitState,
    pub to: CircuitState,
}

/// The lifecycle with its counters.
#[derive(Debug, Clone, Copy)]
enum Phase {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { successes: u32 },
}

impl Phase {
    fn state(self) -> CircuitState {
        match self {
            Phase::Closed { .. } => CircuitState::Closed,
            Phase::Open { .. } => CircuitState::Open,
            Phase::HalfOpen { .. } => CircuitState::HalfOpen,
        }
    }
}

/// One worker's circuit breaker.
#[derive(Debug)]
pub(crate) struct CircuitBreaker {
    config: BreakerConfig,
    phase: Mutex<Phase>,
    /// Mirror of `phase`'s state for lock-free reads.
    state: AtomicU8,
}

impl CircuitBreaker {
    pub(crate) fn new(config: BreakerConfig) -> CircuitBreaker {
        CircuitBreaker {
            config,
            phase: Mutex::new(Phase::Closed { failures: 0 }),
            state: AtomicU8::new(0),
        }
    }

    /// The state now; an open circuit whose timeout has passed turns half-open here (the
    /// returned transition says so).
    pub(crate) fn check(&self) -> (CircuitState, Option<Transition>) {
        let state = CircuitState::from_u8(self.state.load(Ordering::Acquire));
        if state != CircuitState::Open {
            return (state, None);
        }
        let mut phase = self.phase.lock();
        match *phase {
            Phase::Open { until } if Instant::now() >= until => {
                let t = self.set(&mut phase, Phase::HalfOpen { successes: 0 });
                (CircuitState::HalfOpen, t)
            }
            p => (p.state(), None),
        }
    }

    /// True when the circuit lets a request through (closed or half-open).
    #[cfg(test)]
    pub(crate) fn allows(&self) -> bool {
        self.check().0 != CircuitState::Open
    }

    /// When an open circuit turns half-open (`None` unless open).
    pub(crate) fn half_open_at(&self) -> Option<Instant> {
        if self.state() != CircuitState::Open {
            return None;
        }
        match *self.phase.lock() {
            Phase::Open { until } => Some(until),
            _ => None,
        }
    }

    /// The state as last recorded, without the lazy open -> half-open step (for views).
    pub(crate) fn state(&self) -> CircuitState {
        CircuitState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Records one attempt's outcome.
    pub(crate) fn record(&self, success: bool) -> Option<Transition> {
        if self.config.disabled {
            return None;
        }
        let mut phase = self.phase.lock();
        let next = match (*phase, success) {
            (Phase::Closed { .. }, true) => Phase::Closed { failures: 0 },
            (Phase::Closed { failures }, false) => {
                let failures = failures.saturating_add(1);
                if failures >= self.config.failure_threshold {
                    self.open_until()
                } else {
                    Phase::Closed { failures }
                }
            }
            (Phase::HalfOpen { successes }, true) => {
                let successes = successes.saturating_add(1);
                if successes >= self.config.success_threshold {
                    Phase::Closed { failures: 0 }
                } else {
                    Phase::HalfOpen { successes }
                }
            }
            (Phase::HalfOpen { .. }, false) => self.open_until(),
            // An attempt that started before the circuit opened: its outcome changes nothing.
            (open @ Phase::Open { .. }, _) => open,
        };
        self.set(&mut phase, next)
    }

    /// Consecutive failures (closed) or successes (half-open) counted so far.
    pub(crate) fn streak(&self) -> u32 {
        match *self.phase.lock() {
            Phase::Closed { failures } => failures,
            Phase::HalfOpen { successes } => successes,
            Phase::Open { .. } => 0,
        }
    }

    fn open_until(&self) -> Phase {
        Phase::Open {
            until: Instant::now() + self.config.timeout,
        }
    }

    fn set(&self, phase: &mut Phase, next: Phase) -> Option<Transition> {
        let from = phase.state();
        *phase = next;
        let to = next.state();
        self.state.store(to.gauge() as u8, Ordering::Release);
        (from != to).then_some(Transition { from, to })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> CircuitBreaker {
        CircuitBreaker::new(BreakerConfig {
            failure_threshold: 3,
            success_threshold: 2,
            timeout: Duration::from_secs(60),
            disabled: false,
        })
    }

    fn t(from: CircuitState, to: CircuitState) -> Option<Transition> {
        Some(Transition { from, to })
    }

    use CircuitState::*;

    #[tokio::test(start_paused = true)]
    async fn opens_after_consecutive_failures_only() {
        let b = breaker();
        assert_eq!(b.record(false), None);
        assert_eq!(b.record(false), None);
        assert_eq!(b.record(true), None, "a success resets the count");
        assert_eq!(b.record(false), None);
        assert_eq!(b.record(false), None);
        assert_eq!(b.streak(), 2);
        assert_eq!(b.record(false), t(Closed, Open));
        assert!(!b.allows());
        assert_eq!(b.state(), Open);
        assert_eq!(b.record(true), None, "late outcomes do not close it");
        assert!(!b.allows());
    }

    #[tokio::test(start_paused = true)]
    async fn half_opens_after_the_timeout_and_closes_after_successes() {
        let b = breaker();
        for _ in 0..3 {
            b.record(false);
        }
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(b.check(), (Open, None));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(b.check(), (HalfOpen, t(Open, HalfOpen)));
        assert_eq!(b.check(), (HalfOpen, None), "one transition");
        assert!(b.allows());
        assert_eq!(b.record(true), None);
        assert_eq!(b.record(true), t(HalfOpen, Closed));
        assert_eq!(b.state(), Closed);
        assert_eq!(b.streak(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_half_open_failure_reopens_for_a_full_timeout() {
        let b = breaker();
        for _ in 0..3 {
            b.record(false);
        }
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(b.allows());
        b.record(true);
        assert_eq!(b.record(false), t(HalfOpen, Open));
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(!b.allows());
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(b.allows());
        assert_eq!(b.state(), HalfOpen);
    }

    #[tokio::test(start_paused = true)]
    async fn disabled_never_opens() {
        let b = CircuitBreaker::new(BreakerConfig {
            failure_threshold: 1,
            disabled: true,
            ..BreakerConfig::default()
        });
        for _ in 0..100 {
            assert_eq!(b.record(false), None);
        }
        assert!(b.allows());
        assert_eq!(b.state().gauge(), 0);
    }

    #[test]
    fn names_and_gauges() {
        let all = [Closed, Open, HalfOpen];
        let names: Vec<_> = all.iter().map(|s| s.as_str()).collect();
        assert_eq!(names, ["closed", "open", "half_open"]);
        let gauges: Vec<_> = all.iter().map(|s| s.gauge()).collect();
        assert_eq!(gauges, [0, 1, 2]);
        assert!(all
            .iter()
            .all(|s| CircuitState::from_u8(s.gauge() as u8) == *s));
    }
}
