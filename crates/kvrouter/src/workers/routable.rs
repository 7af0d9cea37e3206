//! The routable workers, kept between changes: the list the data plane reads per request,
//! instead of asking every worker for its gates (health, circuit breaker, drain, pause, refit,
//! compatibility) on every request, a cache miss per worker that grew the router's CPU per
//! request with the fleet. Every gate change bumps a generation that the registry's workers
//! share (`gates.rs`); the list is rebuilt on the first read after a change, and when the
//! earliest open breaker's timeout passes (that worker turns half-open, routable again, on the
//! read that notices).

use std::sync::Arc;

use parking_lot::RwLock;
use tokio::time::Instant;

use super::gates::Gates;
use super::worker::Snapshot;

/// The routable subset of a registry's workers (in its id order) for one [`Gates`].
#[derive(Debug, Default)]
pub(super) struct Routable {
    gates: Gates,
    cached: RwLock<Option<Cached>>,
}

#[derive(Debug)]
struct Cached {
    generation: u64,
    /// When the earliest open breaker among the workers left out turns half-open.
    until: Option<Instant>,
    list: Snapshot,
}

impl Routable {
    pub(super) fn gates(&self) -> &Gates {
        &self.gates
    }

    /// The routable workers of `all` (read only when the cached list is stale).
    pub(super) fn get(&self, all: impl FnOnce() -> Snapshot) -> Snapshot {
        // Read before the workers: a change during the rebuild leaves the next read stale.
        let generation = self.gates.generation();
        if let Some(c) = &*self.cached.read() {
            if c.generation == generation && c.until.is_none_or(|u| Instant::now() < u) {
                return c.list.clone();
            }
        }
        let all = all();
        let list: Snapshot = Arc::new(all.iter().filter(|w| w.is_routable()).cloned().collect());
        let until = all.iter().filter_map(|w| w.circuit_half_open_at()).min();
        *self.cached.write() = Some(Cached {
            generation,
            until,
            list: list.clone(),
        });
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::breaker::BreakerConfig;
    use crate::workers::worker::test_worker_with;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn the_list_follows_every_gate_change_and_an_open_breaker_s_timeout() {
        let r = Routable::default();
        let breaker = BreakerConfig {
            failure_threshold: 1,
            timeout: Duration::from_secs(30),
            ..BreakerConfig::default()
        };
        let all: Snapshot = Arc::new(
            (1..=3)
                .map(|id| Arc::new(test_worker_with(id, r.gates(), breaker)))
                .collect(),
        );
        let ids = |s: Snapshot| s.iter().map(|w| w.id.0).collect::<Vec<_>>();
        assert_eq!(ids(r.get(|| all.clone())), [1, 2, 3]);
        // Unchanged gates: the cached list, `all` not read.
        assert_eq!(ids(r.get(|| unreachable!())), [1, 2, 3]);
        all[0].set_paused(true);
        assert_eq!(ids(r.get(|| all.clone())), [2, 3]);
        all[0].set_paused(false);
        all[1].record_outcome(false);
        assert_eq!(ids(r.get(|| all.clone())), [1, 3], "circuit open");
        assert_eq!(ids(r.get(|| unreachable!())), [1, 3]);
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(ids(r.get(|| all.clone())), [1, 2, 3], "half-open");
        for _ in 0..3 {
            all[2].record_failure();
        }
        assert_eq!(ids(r.get(|| all.clone())), [1, 2], "unhealthy");
    }
}
