//! KV pressure per (worker, rank): how full its cache is and how fast its engine evicts, and
//! what that is worth to one request.
//!
//! Sampled on the KV timer from the index (resident blocks, blocks removed by the engine's
//! removal events): the eviction rate is an exponentially weighted mean of blocks evicted per
//! second. Two cost inputs come from it (`cost.rs`):
//!
//! - `lost`: cached blocks expected to be evicted before this request's prefill starts.
//!   SGLang evicts unlocked leaves in least-recently-used order by default (`radix_cache.py`
//!   `evict`: a heap of leaves keyed by `evict_policy.py` `LRUStrategy`, `last_access_time`,
//!   which every `match_prefix` refreshes silently; only inserts and evictions emit events),
//!   and locks the prefix of every running request (`inc_lock_ref`). The router cannot see
//!   hits, so a prefix's place in that order is unknown: taken as uniform, a cached block
//!   survives a wait of `t` seconds with probability `1 - rate * t / resident`. Blocks of a prefill in flight and of a prompt with siblings in
//!   flight are locked, blocks this router predicted there within the TTL were just used: none
//!   of them is at risk (`policy.rs`).
//! - `displaced`: blocks this request's new prefill pushes out of a full cache (beyond its free
//!   pages). Someone re-prefills such a block if it is wanted again, at the chance the fleet's
//!   requests find their prefix cached (the observed reuse, also kept here). This is the future
//!   value of leaving a conversation where its cache lives: moving it re-prefills its context
//!   into a full cache elsewhere, evicting others' prefixes, while its old copy goes to waste.

use std::sync::atomic::{AtomicU64, Ordering};

use super::unit_map::UnitMap;
use kvrouter_index::KvIndex;
use tokio::time::Instant;

use crate::workers::{Rank, WorkerId};

/// Time constant of the eviction-rate mean, seconds.
const RATE_TAU_SECS: f64 = 5.0;
/// Weight of one request in the mean of the observed reuse.
const REUSE_ALPHA: f64 = 1.0 / 256.0;

/// What a request sees of one unit's KV pressure.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Turnover {
    /// Blocks resident on the unit (per KV events).
    pub resident: u64,
    /// Blocks the unit's engine evicts per second (recent mean).
    pub evictions_per_sec: f64,
}

impl Turnover {
    /// Of `at_risk` unlocked cached blocks, those expected to be evicted within `wait_secs`.
    pub fn lost(&self, at_risk: u32, wait_secs: f64) -> u32 {
        if at_risk == 0 || self.resident == 0 || wait_secs.is_nan() || wait_secs <= 0.0 {
            return 0;
        }
        // Bounded first: 0 evictions/s times an infinite wait is no loss, not NaN.
        let wait = wait_secs.min(1e9);
        let share = (self.evictions_per_sec * wait / self.resident as f64).min(1.0);
        (f64::from(at_risk) * share).round() as u32
    }

    /// Blocks a prefill of `new` blocks evicts from a cache of `capacity` blocks (unknown
    /// capacity: none).
    pub fn displaced(&self, capacity: Option<u64>, new: u32) -> u32 {
        let Some(capacity) = capacity else { return 0 };
        let free = capacity.saturating_sub(self.resident);
        u64::from(new)
            .saturating_sub(free)
            .try_into()
            .unwrap_or(u32::MAX)
    }
}

#[derive(Debug)]
struct Sample {
    at: Instant,
    evicted: u64,
    view: Turnover,
}

/// Every unit's pressure and the fleet's observed reuse (see module docs).
#[derive(Debug, Default)]
pub struct UnitPressure {
    units: UnitMap<(WorkerId, Rank), Sample>,
    /// f64 bits of the mean fraction of a request's blocks found cached where it was routed.
    reuse: AtomicU64,
}

impl UnitPressure {
    /// Samples every unit of `index` at `now` (the KV timer calls this).
    pub fn refresh(&self, index: &KvIndex, now: Instant) {
        for (unit, resident, evicted) in index.unit_turnover() {
            let key = (unit.worker, unit.rank);
            let mut s = self.units.entry(key).or_insert_with(|| Sample {
                at: now,
                evicted,
                view: Turnover::default(),
            });
            let dt = now.saturating_duration_since(s.at).as_secs_f64();
            s.view.resident = resident as u64;
            if dt > 0.0 {
                // A cleared and recreated unit restarts its count: no negative rate.
                let rate = evicted.saturating_sub(s.evicted) as f64 / dt;
                let a = 1.0 - (-dt / RATE_TAU_SECS).exp();
                s.view.evictions_per_sec += a * (rate - s.view.evictions_per_sec);
                s.at = now;
                s.evicted = evicted;
            }
        }
    }

    /// The unit's pressure (none until it has events).
    pub fn view(&self, worker: WorkerId, rank: Rank) -> Turnover {
        self.units
            .get(&(worker, rank))
            .map_or(Turnover::default(), |s| s.view)
    }

    /// Counts one routed request that found `fraction` of its blocks cached.
    pub fn observe_reuse(&self, fraction: f64) {
        if !fraction.is_finite() {
            return;
        }
        let old = self.reuse();
        let new = old + REUSE_ALPHA * (fraction.clamp(0.0, 1.0) - old);
        self.reuse.store(new.to_bits(), Ordering::Relaxed);
    }

    /// The observed reuse: mean fraction of a request's blocks found cached (0 at start).
    pub fn reuse(&self) -> f64 {
        f64::from_bits(self.reuse.load(Ordering::Relaxed))
    }

    /// Forgets a removed worker's units.
    pub fn remove_worker(&self, worker: WorkerId) {
        self.units.retain(|(w, _), _| *w != worker);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvrouter_index::KvEvent;
    use std::time::Duration;

    fn stored(hashes: std::ops::Range<u64>) -> KvEvent {
        KvEvent::StoredHashed {
            parent: None,
            block_hashes: hashes.clone().collect(),
            local_hashes: hashes.collect(),
        }
    }

    #[test]
    fn lost_blocks_scale_with_the_turnover_during_the_wait() {
        let t = Turnover {
            resident: 1000,
            evictions_per_sec: 100.0,
        };
        assert_eq!(t.lost(40, 0.0), 0);
        assert_eq!(t.lost(40, 1.0), 4); // a tenth of the cache turns over
        assert_eq!(t.lost(40, 100.0), 40); // all of it
        assert_eq!(Turnover::default().lost(40, 1.0), 0);
        assert_eq!(t.lost(40, f64::NAN), 0);
        assert_eq!(t.lost(40, f64::INFINITY), 40);
        let calm = Turnover {
            evictions_per_sec: 0.0,
            ..t
        };
        assert_eq!(calm.lost(40, f64::INFINITY), 0);
    }

    #[test]
    fn only_a_full_cache_is_displaced() {
        let t = Turnover {
            resident: 90,
            evictions_per_sec: 0.0,
        };
        assert_eq!(t.displaced(Some(100), 4), 0);
        assert_eq!(t.displaced(Some(100), 25), 15);
        assert_eq!(t.displaced(Some(50), 25), 25);
        assert_eq!(t.displaced(None, 25), 0);
    }

    #[test]
    fn eviction_rate_comes_from_removal_events() {
        let index = KvIndex::new(4);
        let p = UnitPressure::default();
        let (w, t0) = (WorkerId(3), Instant::now());
        index.apply(w, 0, &stored(1..101)).unwrap();
        p.refresh(&index, t0);
        assert_eq!(p.view(w, 0).resident, 100);
        assert_eq!(p.view(w, 0).evictions_per_sec, 0.0);
        let gone = KvEvent::Removed {
            block_hashes: (51..101).collect(),
        };
        index.apply(w, 0, &gone).unwrap();
        p.refresh(&index, t0 + Duration::from_secs(1));
        let v = p.view(w, 0);
        assert_eq!(v.resident, 50);
        // 50 blocks/s seen for 1 s of a 5 s mean.
        let want = 50.0 * (1.0 - (-0.2f64).exp());
        assert!((v.evictions_per_sec - want).abs() < 1e-9, "{v:?}");
        // A clear is no eviction.
        index.apply(w, 0, &KvEvent::Cleared).unwrap();
        p.refresh(&index, t0 + Duration::from_secs(2));
        assert!(p.view(w, 0).evictions_per_sec < want);
        p.remove_worker(w);
        assert_eq!(p.view(w, 0), Turnover::default());
    }

    #[tokio::test(start_paused = true)]
    async fn the_eviction_rate_decays_with_the_time_between_samples() {
        use tokio::time::advance;
        let index = KvIndex::new(4);
        let p = UnitPressure::default();
        let w = WorkerId(3);
        index.apply(w, 0, &stored(1..101)).unwrap();
        p.refresh(&index, Instant::now());
        let gone = KvEvent::Removed {
            block_hashes: (51..101).collect(),
        };
        index.apply(w, 0, &gone).unwrap();
        // A sample at the same instant learns nothing (no time passed).
        p.refresh(&index, Instant::now());
        assert_eq!(p.view(w, 0).evictions_per_sec, 0.0);
        // 50 blocks in 1 s, weighed by 1 s of the 5 s mean.
        advance(Duration::from_secs(1)).await;
        p.refresh(&index, Instant::now());
        let first = 50.0 * (1.0 - (-0.2f64).exp());
        assert!((p.view(w, 0).evictions_per_sec - first).abs() < 1e-9);
        // Nothing evicted for one time constant: the mean falls by e.
        advance(Duration::from_secs(5)).await;
        p.refresh(&index, Instant::now());
        let calm = first * (-1.0f64).exp();
        assert!((p.view(w, 0).evictions_per_sec - calm).abs() < 1e-9);
    }

    #[test]
    fn reuse_is_a_running_mean_of_cached_fractions() {
        let p = UnitPressure::default();
        assert_eq!(p.reuse(), 0.0);
        for _ in 0..4096 {
            p.observe_reuse(0.5);
        }
        assert!((p.reuse() - 0.5).abs() < 1e-3);
        p.observe_reuse(f64::NAN);
        assert!((p.reuse() - 0.5).abs() < 1e-3);
    }
}
