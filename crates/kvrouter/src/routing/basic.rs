//! The non-KV policies: round-robin, random and least-load (fewest in-flight requests).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rand::Rng;

use super::input::RoutingInput;
use super::policy::{Choice, Policy};
use crate::workers::Worker;

/// Cycles through the candidates.
#[derive(Default)]
pub(crate) struct RoundRobin {
    next: AtomicUsize,
}

impl Policy for RoundRobin {
    fn name(&self) -> &'static str {
        "round-robin"
    }
    fn select(&self, _: &RoutingInput<'_>, candidates: &[Arc<Worker>]) -> Option<Choice> {
        if candidates.is_empty() {
            return None;
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        Some(Choice::index(n % candidates.len()))
    }
}

/// Picks uniformly at random.
#[derive(Default)]
pub(crate) struct Random;

impl Policy for Random {
    fn name(&self) -> &'static str {
        "random"
    }
    fn select(&self, _: &RoutingInput<'_>, candidates: &[Arc<Worker>]) -> Option<Choice> {
        if candidates.is_empty() {
            return None;
        }
        Some(Choice::index(rand::rng().random_range(0..candidates.len())))
    }
}

/// Picks the candidate with the fewest in-flight requests; ties rotate so equal
/// workers share the traffic.
#[derive(Default)]
pub(crate) struct LeastLoad {
    rotate: AtomicUsize,
}

impl LeastLoad {
    /// Index of the least-loaded candidate (ties broken by a rotating start).
    pub(crate) fn pick(&self, candidates: &[Arc<Worker>]) -> Option<usize> {
        let n = candidates.len();
        if n == 0 {
            return None;
        }
        let start = self.rotate.fetch_add(1, Ordering::Relaxed) % n;
        (0..n)
            .map(|k| (start + k) % n)
            .min_by_key(|&i| candidates[i].in_flight())
    }
}

impl Policy for LeastLoad {
    fn name(&self) -> &'static str {
        "least-load"
    }
    fn select(&self, _: &RoutingInput<'_>, candidates: &[Arc<Worker>]) -> Option<Choice> {
        self.pick(candidates).map(Choice::index)
    }
}
