//! `KvIndex`: the confirmed residency of blocks per (worker, rank) fed by KV
//! events, plus the predicted / in-flight layer, behind one query.
//!
//! Concurrency: the request path (`find_matches`) takes read locks only: the root map's
//! shard and the runs on the request's path (`residency/`), and the pending layer's shards.
//! Event application serializes on the residency's writer mutex (one event at a time,
//! whatever the unit); token hashing happens before it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;

use super::booking::IndexBooking;
use super::calibration::PredictionCalibration;
use super::cap::{unit_cap_blocks, DEFAULT_UNIT_CAP_BLOCKS};
use super::error::IndexError;
use super::event::{Applied, KvEvent, Placement, Tier};
use super::find::prefix_depths;
use super::metrics::metrics;
use super::overlap::{Overlaps, UnitOverlap};
use super::pending::{PendingLayer, PredictionId};
use super::residency::{Residency, Stored};
use super::unit::{worker_range, Unit, UnitId};
use crate::ids::{Rank, WorkerId};
use crate::tokens::{local_hash, SeqHash};

/// Counters since the index was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexStats {
    pub unknown_parent_stores: u64,
    pub unknown_removals: u64,
}

/// The embedded KV index. Share it as `Arc<KvIndex>`.
pub struct KvIndex {
    page_size: u32,
    /// Confirmed residency: the run tree and per-unit state.
    res: Residency,
    /// Per-unit entry caps by worker ([`KvIndex::set_worker_capacity`]); read only when a
    /// unit is created. Workers absent here get [`DEFAULT_UNIT_CAP_BLOCKS`].
    caps: RwLock<HashMap<WorkerId, usize>>,
    unknown_parent: AtomicU64,
    unknown_removals: AtomicU64,
    pending: Arc<PendingLayer>,
}

impl KvIndex {
    /// An empty index for pages of `page_size` tokens.
    pub fn new(page_size: u32) -> Self {
        Self {
            page_size,
            res: Residency::default(),
            caps: RwLock::new(HashMap::new()),
            unknown_parent: AtomicU64::new(0),
            unknown_removals: AtomicU64::new(0),
            pending: Arc::new(PendingLayer::new()),
        }
    }

    pub fn page_size(&self) -> u32 {
        self.page_size
    }

    #[cfg(test)]
    pub(crate) fn residency(&self) -> &Residency {
        &self.res
    }

    fn cap_of(&self, worker: WorkerId) -> usize {
        self.caps
            .read()
            .get(&worker)
            .copied()
            .unwrap_or(DEFAULT_UNIT_CAP_BLOCKS)
    }

    /// Caps each rank of `worker` at its KV capacity: `max_total_num_tokens` (per rank, as
    /// the worker's server info reports it; `None` = unknown) in pages plus slack
    /// (`pages + pages / 10 + 64`; [`DEFAULT_UNIT_CAP_BLOCKS`] when unknown). Applies to its
    /// existing and future units. A store that takes a unit past its cap clears the unit and
    /// returns [`IndexError::CapExceeded`].
    pub fn set_worker_capacity(&self, worker: WorkerId, max_total_num_tokens: Option<u64>) {
        let cap = unit_cap_blocks(max_total_num_tokens, self.page_size);
        self.set_worker_cap_blocks(worker, cap);
    }

    /// [`KvIndex::set_worker_capacity`] with the cap given in entries (blocks) per unit.
    pub fn set_worker_cap_blocks(&self, worker: WorkerId, cap: usize) {
        self.caps.write().insert(worker, cap);
        self.res.set_cap(worker_range(worker), cap);
    }

    /// The entry cap of `(worker, rank)`'s unit.
    pub fn unit_cap(&self, worker: WorkerId, rank: Rank) -> usize {
        let Ok(id) = Unit::new(worker, rank).id() else {
            return 0;
        };
        self.res.unit_cap(id).unwrap_or_else(|| self.cap_of(worker))
    }

    /// Applies one event of `(worker, rank)`. Idempotent: re-storing a resident
    /// block or removing an unknown one changes nothing. A store whose parent is
    /// not resident on that unit is dropped whole and reported as
    /// [`IndexError::UnknownParent`] (the caller should resync the unit).
    pub fn apply(
        &self,
        worker: WorkerId,
        rank: Rank,
        event: &KvEvent,
    ) -> Result<Applied, IndexError> {
        self.apply_in(worker, rank, Placement::GPU, event)
    }

    /// [`KvIndex::apply`] for an event of a namespace and / or tier (`place`): a store
    /// whose first page starts a sequence chains it after the namespace key (see
    /// `tokens::namespace`), so a request finds it only with the same key.
    pub fn apply_in(
        &self,
        worker: WorkerId,
        rank: Rank,
        place: Placement,
        event: &KvEvent,
    ) -> Result<Applied, IndexError> {
        let id = Unit::new(worker, rank).id()?;
        if place.tier != Tier::Gpu {
            // Lower tiers are not indexed yet.
            return Ok(Applied::default());
        }
        let namespace = place.namespace;
        let out = match event {
            KvEvent::Stored {
                parent,
                block_hashes,
                token_ids,
                block_size,
            } => {
                if *block_size != self.page_size {
                    return Err(IndexError::PageSizeMismatch {
                        expected: self.page_size,
                        got: *block_size,
                    });
                }
                let bs = *block_size as usize;
                if token_ids.len() != block_hashes.len() * bs {
                    return Err(IndexError::TokenCountMismatch {
                        blocks: block_hashes.len(),
                        tokens: token_ids.len(),
                        block_size: *block_size,
                    });
                }
                let locals: Vec<u64> = token_ids.chunks_exact(bs).map(local_hash).collect();
                self.store(id, namespace, *parent, block_hashes, &locals)?
            }
            KvEvent::StoredHashed {
                parent,
                block_hashes,
                local_hashes,
            } => {
                if local_hashes.len() != block_hashes.len() {
                    return Err(IndexError::HashCountMismatch {
                        blocks: block_hashes.len(),
                        local_hashes: local_hashes.len(),
                    });
                }
                self.store(id, namespace, *parent, block_hashes, local_hashes)?
            }
            KvEvent::Removed { block_hashes } => self.remove(id, block_hashes),
            KvEvent::Cleared => {
                let removed = self.clear_unit(id, false);
                Applied {
                    removed,
                    ..Applied::default()
                }
            }
        };
        metrics().blocks.set(self.res.resident() as i64);
        Ok(out)
    }

    fn store(
        &self,
        id: UnitId,
        namespace: Option<SeqHash>,
        parent: Option<u64>,
        engine: &[u64],
        locals: &[u64],
    ) -> Result<Applied, IndexError> {
        let worker = Unit::from_id(id).worker;
        let mut seqs = Vec::with_capacity(engine.len());
        let cap = || self.cap_of(worker);
        let ev = Stored {
            parent,
            namespace,
            engine,
            locals,
        };
        let out = self.res.store(id, cap, ev, &mut seqs);
        if let Err(IndexError::UnknownParent { .. }) = out {
            self.unknown_parent.fetch_add(1, Ordering::Relaxed);
            metrics().unknown_parent.inc();
            return out;
        }
        if !self.pending.is_empty() {
            self.pending.supersede(&seqs, id, true);
        }
        out
    }

    fn remove(&self, id: UnitId, engine: &[u64]) -> Applied {
        let mut gone = Vec::new();
        let Some(out) = self.res.remove(id, engine, &mut gone) else {
            return Applied {
                unchanged: engine.len(),
                ..Applied::default()
            };
        };
        self.unknown_removals
            .fetch_add(out.unchanged as u64, Ordering::Relaxed);
        // The worker evicted them: a prediction of them there is void too (a request that
        // needs them again re-stores them, and that event counts).
        self.pending.supersede(&gone, id, false);
        out
    }

    /// Removes every block of unit `id`; `forget` also drops the unit itself
    /// (and its pending bookings). Returns the entries removed.
    fn clear_unit(&self, id: UnitId, forget: bool) -> usize {
        let removed = self.res.clear(id, forget);
        if forget {
            self.pending.drop_unit(id);
        }
        removed
    }

    /// Drops all blocks of one rank (e.g. after a sequence gap or restart).
    pub fn clear_rank(&self, worker: WorkerId, rank: Rank) {
        if let Ok(id) = Unit::new(worker, rank).id() {
            self.clear_unit(id, false);
            metrics().blocks.set(self.res.resident() as i64);
        }
    }

    /// The worker left the fleet: every rank of it disappears from the index,
    /// including its predictions. Stop its event feed first; a later event for
    /// it would register it again.
    pub fn remove_worker(&self, worker: WorkerId) {
        for id in self.res.units_in(worker_range(worker)) {
            self.clear_unit(id, true);
        }
        self.caps.write().remove(&worker);
        metrics().blocks.set(self.res.resident() as i64);
    }

    /// Per unit: confirmed, predicted and in-flight prefix depth of `seqs` (the
    /// request's sequence hashes, from its first page: confirmed depths are found by walking
    /// the residency's tree from its root, so a suffix of a request finds no confirmed
    /// blocks). Only read locks are taken (see the module doc).
    pub fn find_matches(&self, seqs: &[SeqHash]) -> Overlaps {
        self.find_matches_at(seqs, Instant::now())
    }

    /// [`KvIndex::find_matches`] with predictions judged live at `now`.
    pub fn find_matches_at(&self, seqs: &[SeqHash], now: Instant) -> Overlaps {
        let mut units: Vec<UnitOverlap> = Vec::new();
        self.res.find(seqs, &mut units);
        let request_blocks = seqs.len() as u32;
        if self.pending.is_empty() {
            return Overlaps {
                request_blocks,
                units,
            };
        }
        let as_overlap = |(u, d): (UnitId, u32)| UnitOverlap {
            unit: Unit::from_id(u),
            confirmed: d,
            predicted: 0,
            inflight: 0,
        };
        let mut predicted: Vec<(UnitId, u32)> = Vec::new();
        prefix_depths(&self.pending.predicted_view(now), seqs, &mut predicted);
        let mut inflight: Vec<(UnitId, u32)> = Vec::new();
        prefix_depths(&self.pending.inflight_view(), seqs, &mut inflight);
        units.sort_unstable_by_key(|o| o.unit);
        let mut extra = Vec::new();
        for (list, predicted_side) in [(predicted, true), (inflight, false)] {
            for (u, d) in list {
                let unit = Unit::from_id(u);
                let slot = match units.binary_search_by_key(&unit, |o| o.unit) {
                    Ok(i) => &mut units[i],
                    Err(_) => {
                        extra.push(as_overlap((u, 0)));
                        extra.last_mut().expect("just pushed")
                    }
                };
                if predicted_side {
                    slot.predicted = d;
                } else {
                    slot.inflight = d;
                }
            }
            units.append(&mut extra);
            units.sort_unstable_by_key(|o| o.unit);
        }
        Overlaps {
            request_blocks,
            units,
        }
    }

    /// Predict-on-route: marks `seqs` as pending-cached on `(worker, rank)` for
    /// `ttl` and as in flight until the booking's prefill is done. Dropping the
    /// returned [`IndexBooking`] before `prefill_done` cancels both.
    pub fn book(
        &self,
        worker: WorkerId,
        rank: Rank,
        seqs: &[SeqHash],
        ttl: Duration,
    ) -> Result<IndexBooking, IndexError> {
        self.book_at(worker, rank, seqs, ttl, Instant::now())
    }

    /// [`KvIndex::book`] at an explicit instant.
    pub fn book_at(
        &self,
        worker: WorkerId,
        rank: Rank,
        seqs: &[SeqHash],
        ttl: Duration,
        now: Instant,
    ) -> Result<IndexBooking, IndexError> {
        self.book_from_at(worker, rank, seqs, 0, ttl, now)
    }

    /// Like [`KvIndex::book_at`], for a request whose first `cached` blocks are already
    /// cached (or in flight) on the unit: all blocks are predicted, but only the rest are
    /// marked as prefill in flight, so a warm session does not count its cached context as
    /// queued prefill work.
    pub fn book_from_at(
        &self,
        worker: WorkerId,
        rank: Rank,
        seqs: &[SeqHash],
        cached: usize,
        ttl: Duration,
        now: Instant,
    ) -> Result<IndexBooking, IndexError> {
        let id = Unit::new(worker, rank).id()?;
        let pid = self.pending.book(id, seqs, cached, ttl, now);
        Ok(IndexBooking::new(self.pending.clone(), pid))
    }

    /// Ends the in-flight marks of a detached booking.
    pub fn prefill_done(&self, id: PredictionId) {
        self.pending.prefill_done(id);
    }

    /// Drops a detached booking's prediction and in-flight marks.
    pub fn cancel(&self, id: PredictionId) {
        self.pending.cancel(id);
    }

    /// Drops predictions whose TTL ended by `now` (run it from a timer; queries
    /// already ignore expired predictions).
    pub fn expire_predictions(&self, now: Instant) {
        self.pending.expire(now);
    }

    /// How the predictions on `(worker, rank)` turned out, and what is learned from them
    /// (`calibration.rs`). A unit whose worker never sent a store event (no event feed) keeps
    /// the prior: its predictions cannot be confirmed, and are all the router knows of it.
    pub fn prediction_calibration(
        &self,
        worker: WorkerId,
        rank: Rank,
        now: Instant,
    ) -> PredictionCalibration {
        let Ok(id) = Unit::new(worker, rank).id() else {
            return PredictionCalibration::default();
        };
        let view = self.pending.calibration(id, now);
        if view.confirmed == 0 && !self.res.has_unit(id) {
            return PredictionCalibration {
                confirm_ratio: 1.0,
                ..view
            };
        }
        view
    }

    /// [`KvIndex::prediction_calibration`] of every unit that has booked a prediction.
    pub fn prediction_calibrations(&self, now: Instant) -> Vec<(Unit, PredictionCalibration)> {
        self.pending
            .calibrations(now)
            .into_iter()
            .map(|(id, c)| (Unit::from_id(id), c))
            .collect()
    }

    /// Distinct blocks whose prefill is in flight on `(worker, rank)`.
    pub fn inflight_blocks(&self, worker: WorkerId, rank: Rank) -> u64 {
        Unit::new(worker, rank)
            .id()
            .map_or(0, |id| self.pending.inflight_blocks(id))
    }

    /// Resident (block, unit) entries: a unit holding one block under two engine hashes
    /// counts it twice.
    pub fn resident_blocks(&self) -> usize {
        self.res.resident()
    }

    /// Resident entries of one unit.
    pub fn unit_blocks(&self, worker: WorkerId, rank: Rank) -> usize {
        Unit::new(worker, rank)
            .id()
            .map_or(0, |id| self.res.unit_blocks(id))
    }

    /// Every unit's resident blocks and the blocks its engine has evicted so far (removal
    /// events; a clear is not counted): what the router's `routing::kv::pressure` turns into
    /// KV use and eviction rates.
    pub fn unit_turnover(&self) -> Vec<(Unit, usize, u64)> {
        self.res
            .turnover()
            .into_iter()
            .map(|(id, n, evicted)| (Unit::from_id(id), n, evicted))
            .collect()
    }

    /// Order-independent digest of one unit's resident blocks (0 when empty): the XOR of
    /// their sequence hashes, one per entry (a block held under two engine hashes cancels).
    /// Two indexes fed the same events give the same digest, and it equals the XOR of the
    /// engine tree's pages hashed by content (`/debug/index`, the conformance harness).
    pub fn unit_digest(&self, worker: WorkerId, rank: Rank) -> u64 {
        Unit::new(worker, rank)
            .id()
            .map_or(0, |id| self.res.unit_digest(id))
    }

    /// Distinct blocks resident on at least one unit.
    pub fn distinct_blocks(&self) -> usize {
        self.res.distinct_blocks()
    }

    /// Heap bytes of the confirmed index (computed from capacities; the bench checks it
    /// against an allocation-counting allocator).
    pub fn memory_bytes(&self) -> usize {
        self.res.memory_bytes()
    }

    /// Refreshes `kvrouter_index_blocks` and `kvrouter_index_bytes` (call from a
    /// timer or before rendering metrics; `memory_bytes` walks every shard).
    pub fn update_gauges(&self) {
        let m = metrics();
        m.blocks.set(self.res.resident() as i64);
        m.bytes.set(self.memory_bytes() as i64);
    }

    pub fn stats(&self) -> IndexStats {
        IndexStats {
            unknown_parent_stores: self.unknown_parent.load(Ordering::Relaxed),
            unknown_removals: self.unknown_removals.load(Ordering::Relaxed),
        }
    }
}
