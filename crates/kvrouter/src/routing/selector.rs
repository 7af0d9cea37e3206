//! `Selector`: the per-request routing decision (sticky key -> policy -> booking).
//!
//! Requests with an `X-SMG-Routing-Key` go to the worker their key is stuck to while it is a
//! candidate; new keys (and keys whose worker left) go to the least-loaded candidate and are
//! stuck there. Other requests ask the configured policy.

use std::sync::Arc;

use super::basic::{LeastLoad, Random, RoundRobin};
use super::booking::Booking;
use super::input::RoutingInput;
use super::metrics::RoutingMetrics;
use super::policy::{Choice, Policy};
use super::sticky::StickyTable;
use crate::config::Mode;
use crate::workers::Worker;

/// Chooses and books a worker for each request.
pub struct Selector {
    policy: Box<dyn Policy>,
    least_load: LeastLoad,
    sticky: StickyTable,
    metrics: RoutingMetrics,
}

/// The policy for `mode`. `Mode::Kv` is not implemented here yet and falls back to least-load
/// (the caller logs a warning); the KV engineer swaps in their policy via [`Selector::new`].
pub fn policy_for(mode: Mode) -> Box<dyn Policy> {
    match mode {
        Mode::RoundRobin => Box::<RoundRobin>::default(),
        Mode::Random => Box::<Random>::default(),
        Mode::LeastLoad | Mode::Kv => Box::<LeastLoad>::default(),
    }
}

impl Selector {
    pub fn new(policy: Box<dyn Policy>, sticky: StickyTable) -> Selector {
        Selector {
            policy,
            least_load: LeastLoad::default(),
            sticky,
            metrics: RoutingMetrics::get(),
        }
    }

    /// The configured policy's name.
    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    /// The sticky-key table (for sweeping and inspection).
    pub fn sticky(&self) -> &StickyTable {
        &self.sticky
    }

    /// Picks one of `candidates` for `input` and books it; `None` when there is no candidate.
    pub fn select(
        &self,
        input: &RoutingInput<'_>,
        routing_key: Option<&str>,
        candidates: &[Arc<Worker>],
    ) -> Option<Booking> {
        if candidates.is_empty() {
            return None;
        }
        let (choice, label) = match routing_key {
            Some(key) => match self.sticky.lookup(key, candidates) {
                Some(index) => {
                    let choice = self.policy.select_preferring(input, candidates, index)?;
                    if choice.index == index {
                        (choice, "sticky")
                    } else {
                        // The policy overrode an overloaded sticky worker (KV mode only).
                        self.sticky.assign(key, candidates.get(choice.index)?.id);
                        (choice, "sticky-yield")
                    }
                }
                None => {
                    let choice = if self.policy.decides_new_keys() {
                        self.policy.select(input, candidates)?
                    } else {
                        Choice::index(self.least_load.pick(candidates)?)
                    };
                    self.sticky.assign(key, candidates.get(choice.index)?.id);
                    (choice, "sticky-new")
                }
            },
            None => (self.policy.select(input, candidates)?, self.policy.name()),
        };
        let worker = candidates.get(choice.index)?.clone();
        self.metrics.decisions.with_label_values(&[label]).inc();
        Some(Booking::new(worker, choice.rank, choice.observer))
    }
}
