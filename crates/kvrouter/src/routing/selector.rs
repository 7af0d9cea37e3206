//! `Selector`: the per-request routing decision (sticky key -> policy -> booking).
//!
//! Requests with an `X-SMG-Routing-Key` go to the worker their key is stuck to while it is a
//! candidate; new keys (and keys whose worker left) go to the least-loaded candidate and are
//! stuck there. Other requests ask the configured policy.

use std::sync::{Arc, OnceLock};

use prometheus::IntCounter;

use super::basic::{LeastLoad, Random, RoundRobin};
use super::booking::Booking;
use super::input::RoutingInput;
use super::metrics::RoutingMetrics;
use super::policy::{Choice, Policy};
use super::sticky::StickyTable;
use super::Mode;
use crate::workers::Worker;

/// Chooses and books a worker for each request.
pub struct Selector {
    policy: Box<dyn Policy>,
    least_load: LeastLoad,
    sticky: StickyTable,
    metrics: RoutingMetrics,
    /// `kvrouter_routing_decisions_total` children by [`Decided`], looked up at first use
    /// (not per request, and no series before the first decision of its kind).
    decided: [OnceLock<IntCounter>; 4],
}

/// Who decided a request's worker: the `policy` label of `kvrouter_routing_decisions_total`.
#[derive(Clone, Copy)]
enum Decided {
    Policy,
    Sticky,
    StickyYield,
    StickyNew,
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
            decided: Default::default(),
        }
    }

    /// Counts one decision (the counter child is looked up once per label).
    fn count(&self, decided: Decided) {
        let label = match decided {
            Decided::Policy => self.policy.name(),
            Decided::Sticky => "sticky",
            Decided::StickyYield => "sticky-yield",
            Decided::StickyNew => "sticky-new",
        };
        self.decided[decided as usize]
            .get_or_init(|| self.metrics.decisions.with_label_values(&[label]))
            .inc();
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
        let (choice, decided) = match routing_key {
            Some(key) => match self.sticky.lookup(key, candidates) {
                Some(index) => {
                    let choice = self.policy.select_preferring(input, candidates, index)?;
                    if choice.index == index {
                        (choice, Decided::Sticky)
                    } else {
                        // The policy overrode an overloaded sticky worker (KV mode only).
                        self.sticky.assign(key, candidates.get(choice.index)?.id);
                        (choice, Decided::StickyYield)
                    }
                }
                None => {
                    let choice = if self.policy.decides_new_keys() {
                        self.policy.select(input, candidates)?
                    } else {
                        Choice::index(self.least_load.pick(candidates)?)
                    };
                    self.sticky.assign(key, candidates.get(choice.index)?.id);
                    (choice, Decided::StickyNew)
                }
            },
            None => (self.policy.select(input, candidates)?, Decided::Policy),
        };
        let worker = candidates.get(choice.index)?.clone();
        self.count(decided);
        Some(Booking::new(worker, choice.rank, choice.observer))
    }
}
