//! `KvEventSink` for `KvIndex`: the event sources (ZMQ, NATS) apply decoded events here.
//!
//! Errors are not fatal: an unknown parent drops that store (the index counts it; the
//! worker's later stores re-anchor once the parent chain is known again), a page-size
//! mismatch is logged loudly (the events layer already rejects and counts those stores).

use crate::events::{Absorbed, KvEventSink};
use crate::index::{IndexError, KvEvent, KvIndex, Placement};
use crate::workers::{Rank, WorkerId};

impl KvEventSink for KvIndex {
    fn apply(&self, worker: WorkerId, rank: Rank, event: KvEvent) {
        let _ = self.apply_checked(worker, rank, event);
    }

    fn apply_checked(&self, worker: WorkerId, rank: Rank, event: KvEvent) -> Absorbed {
        self.apply_placed(worker, rank, Placement::GPU, event)
    }

    fn apply_placed(
        &self,
        worker: WorkerId,
        rank: Rank,
        place: Placement,
        event: KvEvent,
    ) -> Absorbed {
        match KvIndex::apply_in(self, worker, rank, place, &event) {
            Ok(_) => {}
            Err(IndexError::CapExceeded { blocks, cap }) => {
                return Absorbed::OverCap { blocks, cap };
            }
            Err(e @ IndexError::PageSizeMismatch { .. }) => {
                tracing::error!(worker = worker.0, rank, error = %e, "KV event page size does not match --page-size; store ignored");
            }
            Err(e) => {
                tracing::debug!(worker = worker.0, rank, error = %e, "KV event not applied");
            }
        }
        Absorbed::Ok
    }

    fn set_recovering(&self, worker: WorkerId, rank: Rank, recovering: bool) {
        tracing::info!(
            worker = worker.0,
            rank,
            recovering,
            "KV index rank recovering state"
        );
    }

    fn set_catching_up(&self, worker: WorkerId, catching_up: bool) {
        self.set_bulk_load(worker, catching_up);
    }

    fn unit_cap(&self, worker: WorkerId, rank: Rank) -> usize {
        KvIndex::unit_cap(self, worker, rank)
    }

    fn reserve(&self, worker: WorkerId, rank: Rank, blocks: usize) {
        KvIndex::reserve(self, worker, rank, blocks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::seq_hashes;

    #[test]
    fn events_through_the_sink_reach_the_index() {
        let index = KvIndex::new(4);
        let sink: &dyn KvEventSink = &index;
        let tokens: Vec<u32> = (0..8).collect();
        sink.apply(
            WorkerId(1),
            0,
            KvEvent::Stored {
                parent: None,
                block_hashes: vec![11, 12],
                token_ids: tokens.clone(),
                block_size: 4,
            },
        );
        let seqs = seq_hashes(&tokens, 4);
        assert_eq!(index.find_matches(&seqs).units[0].confirmed, 2);
        // Wrong page size: not applied, not fatal.
        sink.apply(
            WorkerId(2),
            0,
            KvEvent::Stored {
                parent: None,
                block_hashes: vec![1],
                token_ids: vec![0; 8],
                block_size: 8,
            },
        );
        assert_eq!(index.unit_blocks(WorkerId(2), 0), 0);
        sink.apply(WorkerId(1), 0, KvEvent::Cleared);
        assert_eq!(index.unit_blocks(WorkerId(1), 0), 0);
    }
}
