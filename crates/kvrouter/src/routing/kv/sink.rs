//! `KvEventSink` for `KvIndex`: the event sources (ZMQ, NATS) apply decoded events here; and
//! [`TieredSink`], which sends each event to the index of its cache tier (GPU, or one of the
//! lower tiers of `tiers.rs`); and [`EngineLoadSink`], which folds engine load reports into
//! the unit loads.
//!
//! Errors are not fatal: an unknown parent drops that store (the index counts it; the
//! worker's later stores re-anchor once the parent chain is known again), a page-size
//! mismatch is logged loudly (the events layer already rejects and counts those stores).

use std::sync::Arc;

use kvrouter_index::{IndexError, KvEvent, KvIndex, Placement, Tier};

use super::load::UnitLoads;
use super::tiers::LowerTiers;
use crate::events::{Absorbed, KvEventSink, LoadSink, LoadStat};
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

    fn unit_cap(&self, worker: WorkerId, rank: Rank) -> usize {
        KvIndex::unit_cap(self, worker, rank)
    }
}

/// The GPU index and the lower tiers' indexes behind one sink. An event's tier picks its index
/// (stores and removals of a tier touch only that tier); a clear without a lower tier (SGLang's
/// `AllBlocksCleared` carries no medium, and the feeds clear a rank this way on a restart or a
/// gap) clears the rank in every tier. Events of a tier credited 0 are dropped.
pub struct TieredSink {
    pub gpu: Arc<KvIndex>,
    pub tiers: Arc<LowerTiers>,
}

impl KvEventSink for TieredSink {
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
        if place.tier == Tier::Gpu {
            if event == KvEvent::Cleared {
                self.tiers.clear_rank(worker, rank);
            }
            return self.gpu.apply_placed(worker, rank, place, event);
        }
        let Some(index) = self.tiers.index(place.tier) else {
            return Absorbed::Ok;
        };
        // The tier's own index is a plain (GPU-tier) index of that tier's blocks.
        let own = Placement {
            tier: Tier::Gpu,
            ..place
        };
        let out = index.apply_placed(worker, rank, own, event);
        // Every `KvIndex` sets `kvrouter_index_blocks` after an event: an empty removal on the
        // GPU index sets it back to the GPU tier's count (lower tiers have their own gauge).
        let _ = KvIndex::apply(
            &self.gpu,
            worker,
            rank,
            &KvEvent::Removed {
                block_hashes: Vec::new(),
            },
        );
        out
    }

    fn set_recovering(&self, worker: WorkerId, rank: Rank, recovering: bool) {
        KvEventSink::set_recovering(&*self.gpu, worker, rank, recovering);
    }

    fn unit_cap(&self, worker: WorkerId, rank: Rank) -> usize {
        KvIndex::unit_cap(&self.gpu, worker, rank)
    }
}

/// Folds load reports into the unit loads: running + waiting requests, and the KV tokens in
/// use plus queued (`num_total_tokens`) in router blocks. An engine with no request reports no
/// block load (its KV in use then is reserved or cached pages, not work ahead of a request).
pub struct EngineLoadSink {
    pub loads: Arc<UnitLoads>,
    /// The router's page size in tokens (at least 1).
    pub page: u64,
}

impl LoadSink for EngineLoadSink {
    fn report(&self, worker: WorkerId, rank: Rank, stat: &LoadStat) {
        let requests = stat.num_running_reqs.saturating_add(stat.num_waiting_reqs);
        let blocks = if requests == 0 {
            0
        } else {
            stat.num_total_tokens.max(stat.num_tokens) / self.page
        };
        self.loads.report(worker, rank, requests, blocks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvrouter_index::seq_hashes;

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

    #[test]
    fn tiered_sink_routes_by_tier_and_a_clear_empties_every_tier() {
        use super::super::tiers::TierCredits;
        let gpu = Arc::new(KvIndex::new(4));
        let tiers = LowerTiers::new(4, TierCredits::DEFAULT);
        let sink = TieredSink {
            gpu: gpu.clone(),
            tiers: tiers.clone(),
        };
        let tokens: Vec<u32> = (0..8).collect();
        let stored = |h: u64| KvEvent::Stored {
            parent: None,
            block_hashes: vec![h, h + 1],
            token_ids: tokens.clone(),
            block_size: 4,
        };
        let at = |tier| Placement {
            namespace: None,
            tier,
        };
        let (w, r) = (WorkerId(1), 0);
        sink.apply_placed(w, r, at(Tier::Host), stored(10));
        sink.apply_placed(w, r, at(Tier::Disk), stored(10));
        sink.apply(w, r, stored(20));
        assert_eq!(gpu.unit_blocks(w, r), 2);
        assert_eq!(tiers.unit_blocks(Tier::Host, w, r), 2);
        assert_eq!(tiers.unit_blocks(Tier::Disk, w, r), 2);
        // A host removal leaves the GPU and disk copies.
        let removed = KvEvent::Removed {
            block_hashes: vec![11],
        };
        sink.apply_placed(w, r, at(Tier::Host), removed);
        assert_eq!(tiers.unit_blocks(Tier::Host, w, r), 1);
        assert_eq!(
            (gpu.unit_blocks(w, r), tiers.unit_blocks(Tier::Disk, w, r)),
            (2, 2)
        );
        // A tier's own clear clears that tier; a plain clear clears all.
        sink.apply_placed(w, r, at(Tier::Disk), KvEvent::Cleared);
        assert_eq!(tiers.unit_blocks(Tier::Disk, w, r), 0);
        assert_eq!(tiers.unit_blocks(Tier::Host, w, r), 1);
        sink.apply_placed(w, r, at(Tier::Disk), stored(10));
        sink.apply(w, r, KvEvent::Cleared);
        assert_eq!(gpu.unit_blocks(w, r), 0);
        assert_eq!(tiers.resident_blocks(Tier::Host), 0);
        assert_eq!(tiers.resident_blocks(Tier::Disk), 0);
        // Credited 0: not indexed.
        let off = TieredSink {
            gpu: gpu.clone(),
            tiers: LowerTiers::new(4, TierCredits::OFF),
        };
        off.apply_placed(w, r, at(Tier::Host), stored(10));
        assert_eq!(off.tiers.resident_blocks(Tier::Host), 0);
        assert_eq!(gpu.unit_blocks(w, r), 0);
    }
}
