//! Sticky sessions: `X-SMG-Routing-Key` -> worker, with an idle TTL and a key-count cap.
//!
//! A key maps to the worker that served it last. Lookups refresh the entry; entries idle
//! longer than the TTL are swept. If the mapped worker is no longer a candidate (dead,
//! draining, removed) the key simply moves to a new worker on its next request.
//!
//! Clients choose the keys, so the table is bounded in bytes and count: a key is stored as its
//! 128-bit xxh3 hash (seeded per process, so keys cannot be crafted offline to collide; a
//! collision would only share a worker), a fixed 16 bytes whatever the key's length; and once
//! more than `max_keys` are held, the least recently used eighth is evicted
//! (`kvrouter_sticky_evictions_total`), so the cost of a full table is spread over many inserts.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::metrics::RoutingMetrics;
use crate::metrics::bounds::BoundsMetrics;
use crate::workers::{Worker, WorkerId};

/// Default of `--sticky-max-keys`: about 26 MB of table when full (48-byte entries in
/// power-of-two hash tables).
pub(crate) const DEFAULT_STICKY_MAX_KEYS: usize = 262_144;

struct Entry {
    worker: WorkerId,
    last_used: Instant,
}

/// Routing key -> worker assignments.
pub struct StickyTable {
    entries: DashMap<u128, Entry>,
    seed: u64,
    ttl: Duration,
    max_keys: usize,
    /// Held by the one insert that trims a full table (others go on).
    trimming: Mutex<()>,
    metrics: RoutingMetrics,
}

impl StickyTable {
    /// A table with the default key cap.
    pub fn new(ttl: Duration) -> StickyTable {
        StickyTable::with_max_keys(ttl, DEFAULT_STICKY_MAX_KEYS)
    }

    /// A table holding at most `max_keys` keys (at least 1).
    pub fn with_max_keys(ttl: Duration, max_keys: usize) -> StickyTable {
        StickyTable {
            entries: DashMap::new(),
            seed: rand::random(),
            ttl,
            max_keys: max_keys.max(1),
            trimming: Mutex::new(()),
            metrics: RoutingMetrics::get(),
        }
    }

    fn hash(&self, key: &str) -> u128 {
        xxhash_rust::xxh3::xxh3_128_with_seed(key.as_bytes(), self.seed)
    }

    /// Index in `candidates` of the live worker `key` is stuck to, refreshing the entry.
    pub fn lookup(&self, key: &str, candidates: &[Arc<Worker>]) -> Option<usize> {
        let mut entry = self.entries.get_mut(&self.hash(key))?;
        let now = Instant::now();
        if now.duration_since(entry.last_used) > self.ttl {
            return None;
        }
        let index = candidates.iter().position(|w| w.id == entry.worker)?;
        entry.last_used = now;
        Some(index)
    }

    /// Sticks `key` to `worker` (new key, or a key whose worker went away).
    pub fn assign(&self, key: &str, worker: WorkerId) {
        let now = Instant::now();
        let hash = self.hash(key);
        let added = match self.entries.get_mut(&hash) {
            Some(mut e) => {
                if e.worker != worker {
                    self.metrics.sticky_moves.inc();
                }
                e.worker = worker;
                e.last_used = now;
                false
            }
            None => {
                self.entries.insert(
                    hash,
                    Entry {
                        worker,
                        last_used: now,
                    },
                );
                true
            }
        };
        if added && self.entries.len() > self.max_keys {
            self.trim();
        }
        self.metrics.sticky_keys.set(self.entries.len() as i64);
    }

    /// Evicts the least recently used keys down to 7/8 of the cap (one trim at a time).
    fn trim(&self) {
        let Some(_one) = self.trimming.try_lock() else {
            return;
        };
        let keep = self.max_keys - self.max_keys / 8;
        let mut ages: Vec<Instant> = self.entries.iter().map(|e| e.last_used).collect();
        let Some(evict) = ages.len().checked_sub(keep).filter(|n| *n > 0) else {
            return;
        };
        let (_, cutoff, _) = ages.select_nth_unstable(evict - 1);
        let cutoff = *cutoff;
        let before = self.entries.len();
        self.entries.retain(|_, e| e.last_used > cutoff);
        let evicted = before.saturating_sub(self.entries.len());
        BoundsMetrics::get().sticky_evictions.inc_by(evicted as u64);
        crate::metrics::limits::limit_tripped("sticky_max_keys");
        tracing::debug!(
            evicted,
            max_keys = self.max_keys,
            "sticky table full: evicted oldest keys"
        );
    }

    /// Drops entries idle longer than the TTL; returns how many were dropped.
    pub fn sweep(&self) -> usize {
        let before = self.entries.len();
        let now = Instant::now();
        self.entries
            .retain(|_, e| now.duration_since(e.last_used) <= self.ttl);
        let len = self.entries.len();
        self.metrics.sticky_keys.set(len as i64);
        before.saturating_sub(len)
    }

    /// Number of keys currently held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no key is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The idle TTL.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The key-count cap.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_entry_lives_until_it_is_idle_for_longer_than_the_ttl() {
        use tokio::time::advance;
        let ttl = Duration::from_secs(60);
        let t = StickyTable::new(ttl);
        let fleet = vec![Arc::new(Worker::new(
            WorkerId(1),
            "http://w:1",
            crate::workers::WorkerInfo::default(),
        ))];
        t.assign("a", WorkerId(1));
        // Idle for exactly the TTL: still stuck; the lookup refreshes it.
        advance(ttl).await;
        assert_eq!(t.lookup("a", &fleet), Some(0));
        advance(ttl).await;
        assert_eq!(t.lookup("a", &fleet), Some(0));
        // A millisecond more idle: gone for lookups, and swept.
        t.assign("b", WorkerId(1));
        advance(ttl + Duration::from_millis(1)).await;
        assert_eq!(t.lookup("a", &fleet), None);
        assert_eq!(t.lookup("b", &fleet), None);
        assert_eq!(t.len(), 2);
        t.assign("c", WorkerId(1));
        advance(ttl).await;
        assert_eq!(t.sweep(), 2, "a and b expired, c did not");
        assert_eq!(t.lookup("c", &fleet), Some(0));
    }

    #[test]
    fn distinct_keys_beyond_the_default_cap_evict_the_oldest() {
        let t = StickyTable::new(Duration::from_secs(3600));
        for i in 0..300_000u32 {
            t.assign(&format!("key-{i}"), WorkerId(i % 4));
        }
        assert!(t.len() <= 262_144, "{} keys held", t.len());
        let w = |i: u32| {
            Arc::new(Worker::new(
                WorkerId(i),
                &format!("http://w:{i}"),
                crate::workers::WorkerInfo::default(),
            ))
        };
        let fleet: Vec<_> = (0..4).map(w).collect();
        // The newest keys stayed, the oldest went.
        assert_eq!(t.lookup("key-299999", &fleet), Some(3));
        assert_eq!(t.lookup("key-0", &fleet), None);
    }

    #[test]
    fn a_long_key_is_held_in_fixed_size_and_found_again() {
        let t = StickyTable::with_max_keys(Duration::from_secs(3600), 8);
        let long = "k".repeat(1 << 20);
        t.assign(&long, WorkerId(1));
        let fleet = vec![Arc::new(Worker::new(
            WorkerId(1),
            "http://w:1",
            crate::workers::WorkerInfo::default(),
        ))];
        assert_eq!(t.lookup(&long, &fleet), Some(0));
        assert_eq!(t.lookup(&long[1..], &fleet), None);
        for i in 0..100 {
            t.assign(&format!("{long}{i}"), WorkerId(1));
        }
        assert!(t.len() <= 8);
        assert_eq!(std::mem::size_of::<u128>(), 16);
    }
}
