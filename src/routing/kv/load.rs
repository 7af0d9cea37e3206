//! Per-(worker, rank) load the KV policy itself books: requests in flight and the sum of their
//! request blocks (the decode-side context they hold). Released by [`LoadGuard`] on drop.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dashmap::DashMap;

use crate::workers::{Rank, WorkerId};

/// Counters of one unit.
#[derive(Debug, Default)]
pub struct UnitLoad {
    pub requests: AtomicU64,
    pub blocks: AtomicU64,
}

/// All units' counters.
#[derive(Debug, Default)]
pub struct UnitLoads {
    units: DashMap<(WorkerId, Rank), Arc<UnitLoad>>,
}

impl UnitLoads {
    /// `(requests, blocks)` in flight on the unit.
    pub fn get(&self, worker: WorkerId, rank: Rank) -> (u64, u64) {
        self.units.get(&(worker, rank)).map_or((0, 0), |u| {
            (
                u.requests.load(Ordering::Relaxed),
                u.blocks.load(Ordering::Relaxed),
            )
        })
    }

    /// Counts one request of `blocks` blocks on the unit until the guard drops.
    pub fn begin(&self, worker: WorkerId, rank: Rank, blocks: u32) -> LoadGuard {
        let cell = self.units.entry((worker, rank)).or_default().clone();
        cell.requests.fetch_add(1, Ordering::Relaxed);
        cell.blocks.fetch_add(u64::from(blocks), Ordering::Relaxed);
        LoadGuard {
            cell,
            blocks: u64::from(blocks),
        }
    }

    /// Forgets a removed worker's counters (outstanding guards keep their own cell).
    pub fn remove_worker(&self, worker: WorkerId) {
        self.units.retain(|(w, _), _| *w != worker);
    }
}

/// One request's share of a unit's load.
#[derive(Debug)]
pub struct LoadGuard {
    cell: Arc<UnitLoad>,
    blocks: u64,
}

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.cell.requests.fetch_sub(1, Ordering::Relaxed);
        self.cell.blocks.fetch_sub(self.blocks, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_count_and_release() {
        let loads = UnitLoads::default();
        let w = WorkerId(1);
        let a = loads.begin(w, 0, 10);
        let b = loads.begin(w, 0, 5);
        let _c = loads.begin(w, 1, 7);
        assert_eq!(loads.get(w, 0), (2, 15));
        drop(a);
        assert_eq!(loads.get(w, 0), (1, 5));
        drop(b);
        assert_eq!(loads.get(w, 0), (0, 0));
        assert_eq!(loads.get(w, 1), (1, 7));
        assert_eq!(loads.get(WorkerId(9), 0), (0, 0));
    }
}
