//! Sticky sessions: `X-SMG-Routing-Key` -> worker, with an idle TTL.
//!
//! A key maps to the worker that served it last. Lookups refresh the entry; entries idle
//! longer than the TTL are swept. If the mapped worker is no longer a candidate (dead,
//! draining, removed) the key simply moves to a new worker on its next request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;

use super::metrics::RoutingMetrics;
use crate::workers::{Worker, WorkerId};

struct Entry {
    worker: WorkerId,
    last_used: Instant,
}

/// Routing key -> worker assignments.
pub struct StickyTable {
    entries: DashMap<String, Entry>,
    ttl: Duration,
    metrics: RoutingMetrics,
}

impl StickyTable {
    pub fn new(ttl: Duration) -> StickyTable {
        StickyTable {
            entries: DashMap::new(),
            ttl,
            metrics: RoutingMetrics::get(),
        }
    }

    /// Index in `candidates` of the live worker `key` is stuck to, refreshing the entry.
    pub fn lookup(&self, key: &str, candidates: &[Arc<Worker>]) -> Option<usize> {
        let mut entry = self.entries.get_mut(key)?;
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
        match self.entries.get_mut(key) {
            Some(mut e) => {
                if e.worker != worker {
                    self.metrics.sticky_moves.inc();
                }
                e.worker = worker;
                e.last_used = now;
            }
            None => {
                self.entries.insert(
                    key.to_string(),
                    Entry {
                        worker,
                        last_used: now,
                    },
                );
            }
        }
        self.metrics.sticky_keys.set(self.entries.len() as i64);
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
}
