//! `KvIndex`: the confirmed residency of blocks per (worker, rank) fed by KV
//! events, plus the predicted / in-flight layer, behind one query.
//!
//! Concurrency: the request path (`find_matches`) only takes shard read locks
//! of the block map and the pending layer. Event application locks the unit it
//! applies to (events of one unit are serialised, units proceed in parallel)
//! and the block-map shards it touches, one at a time.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use super::block_map::BlockMap;
use super::booking::IndexBooking;
use super::calibration::PredictionCalibration;
use super::cap::{unit_cap_blocks, DEFAULT_UNIT_CAP_BLOCKS};
use super::error::IndexError;
use super::event::{KvEvent, Placement, Tier};
use super::find::prefix_depths;
use super::metrics::metrics;
use super::overlap::{Overlaps, UnitOverlap};
use super::pending::{PendingLayer, PredictionId};
use super::unit::{worker_range, Unit, UnitId};
use super::unit_blocks::{Insert, UnitBlocks};
use crate::ids::{Rank, WorkerId};
use crate::tokens::{local_hash, next_seq, SeqHash};

/// What one `apply` changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// (block, unit) entries added.
    pub stored: usize,
    /// (block, unit) entries removed.
    pub removed: usize,
    /// Blocks already in the requested state (duplicates, unknown removals).
    pub unchanged: usize,
}

/// Counters since the index was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexStats {
    pub unknown_parent_stores: u64,
    pub unknown_removals: u64,
}

type UnitHandle = Arc<Mutex<UnitBlocks>>;

/// The embedded KV index. Share it as `Arc<KvIndex>`.
pub struct KvIndex {
    page_size: u32,
    blocks: BlockMap,
    units: RwLock<HashMap<UnitId, UnitHandle>>,
    /// Per-unit entry caps by worker ([`KvIndex::set_worker_capacity`]); read only when a
    /// unit is created. Workers absent here get [`DEFAULT_UNIT_CAP_BLOCKS`].
    caps: RwLock<HashMap<WorkerId, usize>>,
    /// Workers being bulk loaded ([`KvIndex::set_bulk_load`]); read when a unit is created.
    bulk: RwLock<HashSet<WorkerId>>,
    resident: AtomicI64,
    unknown_parent: AtomicU64,
    unknown_removals: AtomicU64,
    pending: Arc<PendingLayer>,
}

impl KvIndex {
    /// An empty index for pages of `page_size` tokens.
    pub fn new(page_size: u32) -> Self {
        Self {
            page_size,
            blocks: BlockMap::default(),
            units: RwLock::new(HashMap::new()),
            caps: RwLock::new(HashMap::new()),
            bulk: RwLock::new(HashSet::new()),
            resident: AtomicI64::new(0),
            unknown_parent: AtomicU64::new(0),
            unknown_removals: AtomicU64::new(0),
            pending: Arc::new(PendingLayer::new()),
        }
    }

    pub fn page_size(&self) -> u32 {
        self.page_size
    }

    fn unit(&self, id: UnitId) -> UnitHandle {
        if let Some(u) = self.units.read().get(&id) {
            return u.clone();
        }
        let worker = Unit::from_id(id).worker;
        let cap = self.cap_of(worker);
        let mut units = self.units.write();
        // Read under the units lock: `set_bulk_load` changes the set before it visits
        // the units, so a unit created concurrently is either seen by it or sees the change.
        let bulk = self.bulk.read().contains(&worker);
        units
            .entry(id)
            .or_insert_with(|| {
                let mut unit = UnitBlocks::new(id, cap);
                unit.set_bulk(&self.blocks, bulk);
                Arc::new(Mutex::new(unit))
            })
            .clone()
    }

    fn worker_units(&self, worker: WorkerId) -> Vec<UnitHandle> {
        let range = worker_range(worker);
        self.units
            .read()
            .iter()
            .filter(|(id, _)| range.contains(id))
            .map(|(_, u)| u.clone())
            .collect()
    }

    /// Bulk load of `worker`'s ranks on / off: while on (its feed replays a backlog,
    /// e.g. a restarted router reading the JetStream stream before `/readiness`), the
    /// shared block map is updated in large batches ordered by table position instead
    /// of event by event, which makes a rebuild mostly sequential memory traffic. Each
    /// unit's own blocks, counts and digest stay exact; what `find_matches` sees lags
    /// by a bounded number of changes (an under-approximation, like any late event).
    /// Turning it off applies everything: after it returns the index is complete.
    pub fn set_bulk_load(&self, worker: WorkerId, on: bool) {
        if on {
            self.bulk.write().insert(worker);
        } else {
            self.bulk.write().remove(&worker);
        }
        for u in self.worker_units(worker) {
            u.lock().set_bulk(&self.blocks, on);
        }
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
        for u in self.worker_units(worker) {
            u.lock().cap = cap;
        }
    }

    /// Sizes `(worker, rank)`'s own table for about `blocks` resident blocks (at most its
    /// entry cap), e.g. from a feed's estimate of the backlog it replays: one allocation
    /// instead of a rehash at every doubling. A generous estimate is given back when the
    /// worker's bulk load ends ([`KvIndex::set_bulk_load`]) if the table stayed sparse.
    pub fn reserve(&self, worker: WorkerId, rank: Rank, blocks: usize) {
        let Ok(id) = Unit::new(worker, rank).id() else {
            return;
        };
        let handle = self.unit(id);
        let mut unit = handle.lock();
        if !unit.removed {
            unit.reserve_total(blocks);
        }
    }

    /// The entry cap of `(worker, rank)`'s unit.
    pub fn unit_cap(&self, worker: WorkerId, rank: Rank) -> usize {
        let Ok(id) = Unit::new(worker, rank).id() else {
            return 0;
        };
        match self.units.read().get(&id) {
            Some(u) => u.lock().cap,
            None => self.cap_of(worker),
        }
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
                let locals = token_ids.chunks_exact(bs).map(local_hash);
                self.store(id, namespace, *parent, block_hashes, locals)?
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
                self.store(
                    id,
                    namespace,
                    *parent,
                    block_hashes,
                    local_hashes.iter().copied(),
                )?
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
        metrics().blocks.set(self.resident.load(Ordering::Relaxed));
        Ok(out)
    }

    fn store(
        &self,
        id: UnitId,
        namespace: Option<SeqHash>,
        parent: Option<u64>,
        engine: &[u64],
        locals: impl Iterator<Item = u64>,
    ) -> Result<Applied, IndexError> {
        let handle = self.unit(id);
        let mut unit = handle.lock();
        if unit.removed {
            return Ok(Applied {
                unchanged: engine.len(),
                ..Applied::default()
            });
        }
        let mut prev = match parent {
            None => namespace,
            Some(p) => match unit.lookup(&self.blocks, p) {
                Some(seq) => Some(seq),
                None => {
                    self.unknown_parent.fetch_add(1, Ordering::Relaxed);
                    metrics().unknown_parent.inc();
                    return Err(IndexError::UnknownParent { parent: p });
                }
            },
        };
        let mut out = Applied::default();
        let mut new = 0i64;
        let predicting = !self.pending.is_empty();
        // Hash the whole event first (pure compute), then touch the tables.
        let mut seqs = Vec::with_capacity(engine.len());
        for local in locals {
            let seq = next_seq(prev, local);
            prev = Some(seq);
            seqs.push(seq);
        }
        let mut count = |outcome| match outcome {
            Insert::Present => out.unchanged += 1,
            Insert::Replaced => out.stored += 1,
            Insert::Merged => out.removed += 1,
            Insert::New => {
                new += 1;
                out.stored += 1;
            }
        };
        if unit.batchable() && engine.iter().zip(&seqs).all(|(e, s)| e != s) {
            let mut ops = Vec::with_capacity(seqs.len());
            unit.reserve_if_empty(seqs.len());
            for (e, seq) in engine.iter().zip(&seqs) {
                count(unit.insert_deferred(*e, *seq, &mut ops));
            }
            unit.commit(&self.blocks, &mut ops);
        } else {
            for (e, seq) in engine.iter().zip(&seqs) {
                count(unit.insert(&self.blocks, *e, *seq));
            }
        }
        if predicting {
            self.pending.supersede(&seqs, id, true);
        }
        self.resident
            .fetch_add(new - out.removed as i64, Ordering::Relaxed);
        let blocks = unit.len();
        if blocks > unit.cap {
            // More than the worker can hold: stop trusting this unit's view (the events
            // layer marks it recovering) rather than grow without bound.
            let removed = unit.clear(&self.blocks);
            self.resident.fetch_sub(removed as i64, Ordering::Relaxed);
            return Err(IndexError::CapExceeded {
                blocks,
                cap: unit.cap,
            });
        }
        Ok(out)
    }

    fn remove(&self, id: UnitId, engine: &[u64]) -> Applied {
        let Some(handle) = self.units.read().get(&id).cloned() else {
            return Applied {
                unchanged: engine.len(),
                ..Applied::default()
            };
        };
        let mut unit = handle.lock();
        let mut out = Applied::default();
        let mut ops = Vec::new();
        let mut gone = Vec::new();
        let predicting = !self.pending.is_empty();
        for e in engine {
            let removed = if unit.batchable() {
                unit.remove_deferred(*e, &mut ops)
            } else {
                unit.remove(&self.blocks, *e)
            };
            match removed {
                Some(seq) => {
                    out.removed += 1;
                    if predicting {
                        gone.push(seq);
                    }
                }
                None => {
                    self.unknown_removals.fetch_add(1, Ordering::Relaxed);
                    out.unchanged += 1;
                }
            }
        }
        unit.commit(&self.blocks, &mut ops);
        // The worker evicted them: a prediction of them there is void too (a request that
        // needs them again re-stores them, and that event counts).
        self.pending.supersede(&gone, id, false);
        unit.evicted += out.removed as u64;
        self.resident
            .fetch_sub(out.removed as i64, Ordering::Relaxed);
        out
    }

    /// Removes every block of unit `id`; `forget` also drops the unit itself
    /// (and its pending bookings). Returns the entries removed.
    fn clear_unit(&self, id: UnitId, forget: bool) -> usize {
        let handle = if forget {
            self.units.write().remove(&id)
        } else {
            self.units.read().get(&id).cloned()
        };
        let Some(handle) = handle else { return 0 };
        let mut unit = handle.lock();
        unit.removed |= forget;
        let removed = unit.clear(&self.blocks);
        self.resident.fetch_sub(removed as i64, Ordering::Relaxed);
        if forget {
            self.pending.drop_unit(id);
        }
        removed
    }

    /// Drops all blocks of one rank (e.g. after a sequence gap or restart).
    pub fn clear_rank(&self, worker: WorkerId, rank: Rank) {
        if let Ok(id) = Unit::new(worker, rank).id() {
            self.clear_unit(id, false);
            metrics().blocks.set(self.resident.load(Ordering::Relaxed));
        }
    }

    /// The worker left the fleet: every rank of it disappears from the index,
    /// including its predictions. Stop its event feed first; a later event for
    /// it would register it again.
    pub fn remove_worker(&self, worker: WorkerId) {
        let range = worker_range(worker);
        let ids: Vec<UnitId> = self
            .units
            .read()
            .keys()
            .copied()
            .filter(|id| range.contains(id))
            .collect();
        for id in ids {
            self.clear_unit(id, true);
        }
        self.caps.write().remove(&worker);
        self.bulk.write().remove(&worker);
        metrics().blocks.set(self.resident.load(Ordering::Relaxed));
    }

    /// Per unit: confirmed, predicted and in-flight prefix depth of `seqs` (the
    /// request's sequence hashes). Only shard read locks are taken.
    pub fn find_matches(&self, seqs: &[SeqHash]) -> Overlaps {
        self.find_matches_at(seqs, Instant::now())
    }

    /// [`KvIndex::find_matches`] with predictions judged live at `now`.
    pub fn find_matches_at(&self, seqs: &[SeqHash], now: Instant) -> Overlaps {
        let mut units: Vec<UnitOverlap> = Vec::new();
        prefix_depths(&self.blocks, seqs, &mut units);
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
        if view.confirmed == 0 && !self.units.read().contains_key(&id) {
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

    /// Resident (block, unit) entries.
    pub fn resident_blocks(&self) -> usize {
        self.resident.load(Ordering::Relaxed).max(0) as usize
    }

    /// Resident blocks of one unit.
    pub fn unit_blocks(&self, worker: WorkerId, rank: Rank) -> usize {
        let Ok(id) = Unit::new(worker, rank).id() else {
            return 0;
        };
        self.units.read().get(&id).map_or(0, |u| u.lock().len())
    }

    /// Every unit's resident blocks and the blocks its engine has evicted so far (removal
    /// events; a clear is not counted): what the router's `routing::kv::pressure` turns into
    /// KV use and eviction rates.
    pub fn unit_turnover(&self) -> Vec<(Unit, usize, u64)> {
        let units: Vec<(UnitId, UnitHandle)> = self
            .units
            .read()
            .iter()
            .map(|(id, u)| (*id, u.clone()))
            .collect();
        units
            .into_iter()
            .map(|(id, u)| {
                let u = u.lock();
                (Unit::from_id(id), u.len(), u.evicted)
            })
            .collect()
    }

    /// Order-independent digest of one unit's resident blocks (0 when empty): two indexes
    /// fed the same events give the same digest (used by `/debug/index`).
    pub fn unit_digest(&self, worker: WorkerId, rank: Rank) -> u64 {
        let Ok(id) = Unit::new(worker, rank).id() else {
            return 0;
        };
        self.units.read().get(&id).map_or(0, |u| u.lock().digest())
    }

    /// Distinct blocks resident on at least one unit.
    pub fn distinct_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Heap bytes of the confirmed index (computed from table capacities; the
    /// bench checks it against an allocation-counting allocator).
    pub fn memory_bytes(&self) -> usize {
        let units = self.units.read();
        let per_unit: usize = units.values().map(|u| u.lock().heap_bytes()).sum();
        self.blocks.heap_bytes() + per_unit + units.capacity() * 17
    }

    /// Refreshes `kvrouter_index_blocks` and `kvrouter_index_bytes` (call from a
    /// timer or before rendering metrics; `memory_bytes` walks every shard).
    pub fn update_gauges(&self) {
        let m = metrics();
        m.blocks.set(self.resident.load(Ordering::Relaxed));
        m.bytes.set(self.memory_bytes() as i64);
    }

    pub fn stats(&self) -> IndexStats {
        IndexStats {
            unknown_parent_stores: self.unknown_parent.load(Ordering::Relaxed),
            unknown_removals: self.unknown_removals.load(Ordering::Relaxed),
        }
    }
}
