//! Predict-on-route state: blocks a routing decision expects to become cached
//! on a unit (predicted, with a TTL) and blocks whose prefill is in flight there
//! (refcounted, so N siblings carrying the same block count it once).
//!
//! Every booking is a record (unit, its sequence hashes, what is still live)
//! plus per-block entries in a sharded map the query side reads like the
//! confirmed map (inline for the usual one or two units per block: no allocation
//! per booked block). Predictions end on expiry, on `cancel` (the request failed
//! before prefill) or per block when a real `BlockStored` or `BlockRemoved` of
//! that block on that unit supersedes them;
//! in-flight marks end on `prefill_done` or `cancel`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use smallvec::SmallVec;

use super::calibration::{Calibration, Outcome, PredictionCalibration};
use super::find::DepthSource;
use super::hashers::{IdBuild, MulBuild};
use super::unit::UnitId;
use crate::tokens::SeqHash;

const SHARDS: usize = 64;
const RECORD_SHARDS: usize = 16;

/// Identifies one booking (for explicit `prefill_done` / `cancel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PredictionId(pub u64);

#[derive(Clone, Copy)]
struct Entry {
    unit: UnitId,
    predicted: u32,
    inflight: u32,
    /// Predicted marks are void from this instant (ms since the layer's epoch).
    until_ms: u64,
    /// Booking instant of the prediction awaiting its outcome (`calibration.rs`; 0: none, the
    /// unit held the block or was predicted to when it was booked).
    awaiting_ms: u64,
}

struct Record {
    unit: UnitId,
    seqs: Box<[SeqHash]>,
    /// Blocks before this index were cached on the unit at booking: predicted, not in flight.
    inflight_from: usize,
    predicted: bool,
    inflight: bool,
}

#[derive(Default)]
struct Records {
    live: HashMap<u64, Record, MulBuild>,
    expiry: BinaryHeap<Reverse<(u64, u64)>>,
}

#[repr(align(128))]
#[derive(Default)]
struct Shard(RwLock<HashMap<SeqHash, Entries, IdBuild>>);

/// A block's entries, one per unit, sorted by unit.
type Entries = SmallVec<[Entry; 2]>;

pub(crate) struct PendingLayer {
    shards: Box<[Shard]>,
    records: Box<[Mutex<Records>]>,
    next_id: AtomicU64,
    live_records: AtomicUsize,
    calibration: Calibration,
    epoch: Instant,
}

#[inline]
fn shard_of(seq: SeqHash) -> usize {
    ((seq >> 40) as usize) & (SHARDS - 1)
}

impl PendingLayer {
    pub(crate) fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            records: (0..RECORD_SHARDS).map(|_| Mutex::default()).collect(),
            next_id: AtomicU64::new(1),
            live_records: AtomicUsize::new(0),
            calibration: Calibration::default(),
            epoch: Instant::now(),
        }
    }

    pub(crate) fn ms(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_millis() as u64
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.live_records.load(Ordering::Acquire) == 0
    }

    /// Marks `seqs` predicted (until `now + ttl`) and in flight on `unit`.
    pub(crate) fn book(
        &self,
        unit: UnitId,
        seqs: &[SeqHash],
        inflight_from: usize,
        ttl: Duration,
        now: Instant,
    ) -> PredictionId {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let now_ms = self.ms(now);
        let until = now_ms
            .saturating_add(ttl.as_millis() as u64)
            .max(now_ms + 1);
        let mut awaiting = 0;
        for (block, &seq) in seqs.iter().enumerate() {
            let mut shard = self.shards[shard_of(seq)].0.write();
            let entries = shard.entry(seq).or_default();
            let i = match entries.binary_search_by_key(&unit, |e| e.unit) {
                Ok(i) => i,
                Err(i) => {
                    entries.insert(
                        i,
                        Entry {
                            unit,
                            predicted: 0,
                            inflight: 0,
                            until_ms: 0,
                            awaiting_ms: 0,
                        },
                    );
                    i
                }
            };
            let e = &mut entries[i];
            e.predicted += 1;
            e.until_ms = e.until_ms.max(until);
            if block >= inflight_from {
                if e.awaiting_ms == 0 {
                    e.awaiting_ms = now_ms.max(1);
                    awaiting += 1;
                }
                e.inflight += 1;
            }
        }
        let record = Record {
            unit,
            seqs: seqs.into(),
            inflight_from,
            predicted: true,
            inflight: true,
        };
        self.calibration.booked(unit, awaiting);
        let mut records = self.records[id as usize % RECORD_SHARDS].lock();
        records.live.insert(id, record);
        records.expiry.push(Reverse((until, id)));
        self.live_records.fetch_add(1, Ordering::AcqRel);
        Self::expire_shard(self, &mut records, now_ms);
        PredictionId(id)
    }

    /// The booking's prefill finished: its blocks are no longer in flight.
    pub(crate) fn prefill_done(&self, id: PredictionId) {
        let mut records = self.records[id.0 as usize % RECORD_SHARDS].lock();
        let Some(r) = records.live.get_mut(&id.0) else {
            return;
        };
        if !std::mem::replace(&mut r.inflight, false) {
            return;
        }
        let (unit, done, from) = (r.unit, !r.predicted, r.inflight_from);
        let seqs = if done {
            self.live_records.fetch_sub(1, Ordering::AcqRel);
            records.live.remove(&id.0).map(|r| r.seqs)
        } else {
            records.live.get(&id.0).map(|r| r.seqs.clone())
        };
        drop(records);
        let mut ended = Ended::default();
        for seq in seqs.iter().flat_map(|s| s.iter().skip(from)) {
            ended.add(self.release(*seq, unit, false, true));
        }
        // Predictions that expired in flight and ended with it unconfirmed.
        let now_ms = self.ms(Instant::now());
        ended.count(&self.calibration, unit, now_ms, true);
    }

    /// The request ended before (or without) prefill: drop its prediction and
    /// its in-flight marks.
    pub(crate) fn cancel(&self, id: PredictionId) {
        let record = self.records[id.0 as usize % RECORD_SHARDS]
            .lock()
            .live
            .remove(&id.0);
        if let Some(r) = record {
            self.live_records.fetch_sub(1, Ordering::AcqRel);
            let mut ended = Ended::default();
            for (i, seq) in r.seqs.iter().enumerate() {
                let inflight = r.inflight && i >= r.inflight_from;
                ended.add(self.release(*seq, r.unit, r.predicted, inflight));
            }
            let now_ms = self.ms(Instant::now());
            ended.count(&self.calibration, r.unit, now_ms, false);
        }
    }

    /// Drops every prediction whose TTL ended at or before `now`.
    pub(crate) fn expire(&self, now: Instant) {
        let now_ms = self.ms(now);
        for shard in self.records.iter() {
            self.expire_shard(&mut shard.lock(), now_ms);
        }
    }

    fn expire_shard(&self, records: &mut Records, now_ms: u64) {
        while let Some(Reverse((until, id))) = records.expiry.peek().copied() {
            if until > now_ms {
                break;
            }
            records.expiry.pop();
            let Some(r) = records.live.get_mut(&id) else {
                continue;
            };
            if !std::mem::replace(&mut r.predicted, false) {
                continue;
            }
            let (unit, inflight) = (r.unit, r.inflight);
            let seqs = if inflight {
                r.seqs.clone()
            } else {
                self.live_records.fetch_sub(1, Ordering::AcqRel);
                records.live.remove(&id).map(|r| r.seqs).unwrap_or_default()
            };
            let mut ended = Ended::default();
            for seq in seqs.iter() {
                ended.add(self.release(*seq, unit, true, false));
            }
            ended.count(&self.calibration, unit, now_ms, true);
        }
    }

    /// Drops one predicted and / or in-flight mark of `seq` on `unit`; the booking instant of
    /// the prediction that ended awaiting its outcome, if any (the caller counts the outcome).
    fn release(&self, seq: SeqHash, unit: UnitId, predicted: bool, inflight: bool) -> Option<u64> {
        let mut shard = self.shards[shard_of(seq)].0.write();
        let entries = shard.get_mut(&seq)?;
        let i = entries.binary_search_by_key(&unit, |e| e.unit).ok()?;
        let e = &mut entries[i];
        if predicted {
            e.predicted = e.predicted.saturating_sub(1);
            if e.predicted == 0 {
                e.until_ms = 0;
            }
        }
        if inflight && e.inflight > 0 {
            e.inflight -= 1;
        }
        // A prediction still in flight keeps awaiting its store event past the TTL (a slow
        // prefill is no failed bet; its delay teaches the TTL); it ends with the entry.
        let mut ended = None;
        if e.predicted == 0 && e.inflight == 0 {
            ended = (e.awaiting_ms > 0).then_some(e.awaiting_ms);
            entries.remove(i);
            if entries.is_empty() {
                shard.remove(&seq);
                let (len, cap) = (shard.len(), shard.capacity());
                if len * 4 < cap {
                    shard.shrink_to(len * 2);
                }
            }
        }
        ended
    }

    /// A real event of `unit` spoke about `seqs` (`stored`: a `BlockStored` confirmed them;
    /// else a `BlockRemoved` evicted them): their predictions there are done (counted as
    /// confirmed or removed); in-flight marks stay.
    pub(crate) fn supersede(&self, seqs: &[SeqHash], unit: UnitId, stored: bool) {
        if self.is_empty() {
            return;
        }
        let (mut ended, mut booked_ms) = (0, 0);
        for &seq in seqs {
            let mut shard = self.shards[shard_of(seq)].0.write();
            let Some(entries) = shard.get_mut(&seq) else {
                continue;
            };
            let Ok(i) = entries.binary_search_by_key(&unit, |e| e.unit) else {
                continue;
            };
            let e = &mut entries[i];
            let awaiting = std::mem::take(&mut e.awaiting_ms);
            if awaiting > 0 {
                ended += 1;
                booked_ms = booked_ms.max(awaiting);
            }
            e.predicted = 0;
            e.until_ms = 0;
            if e.inflight == 0 {
                entries.remove(i);
                if entries.is_empty() {
                    shard.remove(&seq);
                }
            }
        }
        if ended > 0 {
            let now_ms = self.ms(Instant::now());
            let outcome = if stored {
                Outcome::Confirmed {
                    after_ms: now_ms.saturating_sub(booked_ms),
                }
            } else {
                Outcome::Removed
            };
            self.calibration.ended(unit, outcome, ended, now_ms);
        }
    }

    /// The prediction outcomes of `unit` and what is learned from them.
    pub(crate) fn calibration(&self, unit: UnitId, now: Instant) -> PredictionCalibration {
        self.calibration.view(unit, self.ms(now))
    }

    /// [`PendingLayer::calibration`] of every unit that has booked a prediction.
    pub(crate) fn calibrations(&self, now: Instant) -> Vec<(UnitId, PredictionCalibration)> {
        self.calibration.all(self.ms(now))
    }

    /// Distinct blocks in flight on `unit`: walks the whole pending map (diagnostics and
    /// tests; no decision reads it).
    pub(crate) fn inflight_blocks(&self, unit: UnitId) -> u64 {
        let mut n = 0;
        for shard in self.shards.iter() {
            n += shard
                .0
                .read()
                .values()
                .filter(|es| es.iter().any(|e| e.unit == unit && e.inflight > 0))
                .count() as u64;
        }
        n
    }

    /// Forgets everything pending on `unit` (its worker left or was cleared).
    pub(crate) fn drop_unit(&self, unit: UnitId) {
        let mut ids = Vec::new();
        for shard in self.records.iter() {
            ids.extend(
                shard
                    .lock()
                    .live
                    .iter()
                    .filter(|(_, r)| r.unit == unit)
                    .map(|(id, _)| *id),
            );
        }
        for id in ids {
            self.cancel(PredictionId(id));
        }
        self.calibration.forget(unit);
    }

    pub(crate) fn predicted_view(&self, now: Instant) -> View<'_> {
        View {
            layer: self,
            now_ms: self.ms(now),
            predicted: true,
        }
    }

    pub(crate) fn inflight_view(&self) -> View<'_> {
        View {
            layer: self,
            now_ms: 0,
            predicted: false,
        }
    }
}

/// Predictions of one record that ended awaiting their outcome: how many, and the earliest
/// booking instant among them (their age is the delay they are known to exceed).
#[derive(Default)]
struct Ended {
    n: u64,
    first_ms: Option<u64>,
}

impl Ended {
    fn add(&mut self, booked_ms: Option<u64>) {
        if let Some(b) = booked_ms {
            self.n += 1;
            self.first_ms = Some(self.first_ms.map_or(b, |f| f.min(b)));
        }
    }

    /// Counts them as expired (`expired`) or cancelled at `now_ms`.
    fn count(&self, calibration: &Calibration, unit: UnitId, now_ms: u64, expired: bool) {
        let Some(first) = self.first_ms else { return };
        let outcome = if expired {
            Outcome::Expired {
                after_ms: now_ms.saturating_sub(first),
            }
        } else {
            Outcome::Cancelled
        };
        calibration.ended(unit, outcome, self.n, now_ms);
    }
}

/// One face of the pending layer as a [`DepthSource`]: live predictions or
/// in-flight marks.
pub(crate) struct View<'a> {
    layer: &'a PendingLayer,
    now_ms: u64,
    predicted: bool,
}

impl View<'_> {
    #[inline]
    fn counts(&self, e: &Entry) -> bool {
        if self.predicted {
            e.predicted > 0 && e.until_ms > self.now_ms
        } else {
            e.inflight > 0
        }
    }
}

impl DepthSource for View<'_> {
    fn count(&self, seq: SeqHash) -> usize {
        let shard = self.layer.shards[shard_of(seq)].0.read();
        shard
            .get(&seq)
            .map_or(0, |es| es.iter().filter(|e| self.counts(e)).count())
    }

    fn units(&self, seq: SeqHash, out: &mut Vec<UnitId>) {
        out.clear();
        let shard = self.layer.shards[shard_of(seq)].0.read();
        if let Some(es) = shard.get(&seq) {
            out.extend(es.iter().filter(|e| self.counts(e)).map(|e| e.unit));
        }
    }
}
