//! Routing units: a (worker, DP rank) pair, packed into a dense `UnitId` (u32)
//! inside the index so block entries stay small and decode without a lookup.

use crate::ids::{Rank, WorkerId};

use super::error::IndexError;

/// One routing target: a worker and one of its DP ranks (its own KV cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Unit {
    pub worker: WorkerId,
    pub rank: Rank,
}

/// Packed unit inside the index: `worker << RANK_BITS | rank`, always below 2^31 - 1
/// so two of them fit inline in one block entry (see `unit_set`).
pub(crate) type UnitId = u32;

const RANK_BITS: u32 = 8;
/// Largest DP rank the index accepts.
pub const MAX_RANK: Rank = (1 << RANK_BITS) - 1;
/// Largest worker id the index accepts.
pub const MAX_WORKER_ID: u32 = (1 << (31 - RANK_BITS)) - 2;

impl Unit {
    pub fn new(worker: WorkerId, rank: Rank) -> Self {
        Self { worker, rank }
    }

    pub(crate) fn id(self) -> Result<UnitId, IndexError> {
        if self.worker.0 > MAX_WORKER_ID || self.rank > MAX_RANK {
            return Err(IndexError::UnitOutOfRange {
                worker: self.worker,
                rank: self.rank,
            });
        }
        Ok((self.worker.0 << RANK_BITS) | self.rank)
    }

    pub(crate) fn from_id(id: UnitId) -> Self {
        Self {
            worker: WorkerId(id >> RANK_BITS),
            rank: id & MAX_RANK,
        }
    }
}

/// All unit ids of one worker lie in `worker_range(w)`.
pub(crate) fn worker_range(worker: WorkerId) -> std::ops::RangeInclusive<UnitId> {
    let lo = worker.0 << RANK_BITS;
    lo..=lo | MAX_RANK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_stay_below_the_inline_limit() {
        for (w, r) in [(0, 0), (1, 3), (MAX_WORKER_ID, MAX_RANK)] {
            let u = Unit::new(WorkerId(w), r);
            let id = u.id().unwrap();
            assert!(id < (1 << 31) - 1);
            assert_eq!(Unit::from_id(id), u);
            assert!(worker_range(WorkerId(w)).contains(&id));
        }
        assert!(Unit::new(WorkerId(MAX_WORKER_ID + 1), 0).id().is_err());
        assert!(Unit::new(WorkerId(0), MAX_RANK + 1).id().is_err());
    }
}
