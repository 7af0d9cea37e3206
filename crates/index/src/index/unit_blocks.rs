//! One unit's own view of its resident blocks: engine hash -> router sequence
//! hash, used for removals and parent lookup.
//!
//! Identity elision: when an engine already sends the router's sequence hashes
//! (Dynamo-format events, kvrouter's own relay) nothing is stored per unit: the
//! block map's membership is the record, and only a count is kept. Enumerating
//! those blocks (clear / remove worker) then scans the block map.
//!
//! Copies: two engine hashes of one unit may map to the same router block (the engine holds
//! the pages twice, see [`super::copies`]); the block map records the holder once and
//! [`Copies`] counts the rest, so the holder goes only with its last copy. Identity records
//! are not counted (an engine that sends the router's own hashes has one hash per block).

use hashbrown::hash_map::Entry;

use super::block_map::{BlockMap, Op};
use super::copies::Copies;
use super::event::EngineHash;
use super::hashers::MulBuild;
use super::table::{self, Table};
use super::unit::UnitId;
use crate::tokens::SeqHash;

pub(crate) struct UnitBlocks {
    id: UnitId,
    /// Set once the unit was removed; late events on a stale handle are ignored.
    pub(crate) removed: bool,
    /// Most entries this unit may hold (see [`super::cap`]); checked after each store.
    pub(crate) cap: usize,
    /// Blocks the engine evicted (removal events) since the unit was created.
    pub(crate) evicted: u64,
    mapped: Table<EngineHash, SeqHash, MulBuild>,
    identity: usize,
    /// Blocks held under more than one engine hash (see module docs).
    copies: Copies,
    /// Bulk load ([`UnitBlocks::set_bulk`]): block-map changes not applied yet, in order.
    deferred: Vec<Op>,
    bulk: bool,
}

/// A bulk-loading unit applies its deferred block-map changes once this many have
/// accumulated (16 B each: 8 MiB per unit at most; per shard of the block map about
/// 4,000 ops, dense enough that ordered inserts walk its table forwards).
#[cfg(not(test))]
const BULK_FLUSH_OPS: usize = 1 << 19;
/// Small in tests, so the model check also flushes in the middle of a bulk load.
#[cfg(test)]
const BULK_FLUSH_OPS: usize = 64;

/// Outcome of [`UnitBlocks::insert`].
pub(crate) enum Insert {
    /// Already resident with this content.
    Present,
    New,
    /// The engine hash was resident with other content, now replaced.
    Replaced,
    /// The engine hash's old content was dropped; the new one was already held.
    Merged,
}

impl UnitBlocks {
    pub(crate) fn new(id: UnitId, cap: usize) -> Self {
        Self {
            id,
            removed: false,
            cap,
            evicted: 0,
            mapped: Table::default(),
            identity: 0,
            copies: Copies::default(),
            deferred: Vec::new(),
            bulk: false,
        }
    }

    /// Bulk load on / off. While on (a feed replaying a backlog, e.g. a restarted
    /// router reading the JetStream stream), the block-map changes of batchable stores
    /// and removals are kept in order and applied in large batches ordered by table
    /// position ([`BlockMap::apply_bulk`]); this unit's own table, its counts and its
    /// digest stay exact throughout, only the block map (what queries read) lags by
    /// at most [`BULK_FLUSH_OPS`] changes. Turning it off applies everything deferred.
    pub(crate) fn set_bulk(&mut self, blocks: &BlockMap, on: bool) {
        self.bulk = on;
        if !on {
            self.flush(blocks);
            self.deferred = Vec::new();
            // A size estimate ([`UnitBlocks::reserve_total`]) may have been generous.
            self.shrink_if_sparse();
        }
    }

    /// Applies the deferred block-map changes (before anything that reads or
    /// changes this unit's block-map entries directly).
    fn flush(&mut self, blocks: &BlockMap) {
        if !self.deferred.is_empty() {
            blocks.apply_bulk(self.id, &mut self.deferred, &mut self.copies);
        }
    }

    /// Applies the block-map changes `ops` of one batchable event (see
    /// [`UnitBlocks::insert_deferred`]): at once, or deferred while bulk loading.
    /// Empties `ops`.
    pub(crate) fn commit(&mut self, blocks: &BlockMap, ops: &mut Vec<Op>) {
        if !self.bulk {
            blocks.apply_batch(self.id, ops, &mut self.copies);
            return;
        }
        self.deferred.append(ops);
        if self.deferred.len() >= BULK_FLUSH_OPS {
            self.flush(blocks);
        }
    }

    pub(crate) fn lookup(&self, blocks: &BlockMap, engine: EngineHash) -> Option<SeqHash> {
        if let Some(seq) = self.mapped.get(&engine) {
            return Some(*seq);
        }
        (self.identity > 0 && blocks.holds(engine, self.id)).then_some(engine)
    }

    /// Makes `engine -> seq` resident on this unit (block map included).
    pub(crate) fn insert(&mut self, blocks: &BlockMap, engine: EngineHash, seq: SeqHash) -> Insert {
        self.flush(blocks);
        if engine != seq {
            // Opaque engine hash: one probe of the unit's table decides.
            table::make_room(&mut self.mapped);
            match self.mapped.entry(engine) {
                Entry::Occupied(o) if *o.get() == seq => return Insert::Present,
                Entry::Occupied(mut o) => {
                    let old = o.insert(seq);
                    blocks.drop_copy(old, self.id, &mut self.copies);
                    blocks.add_copy(seq, self.id, &mut self.copies);
                    return Insert::Replaced;
                }
                Entry::Vacant(v) => {
                    v.insert(seq);
                    if self.identity == 0 || !blocks.holds(engine, self.id) {
                        blocks.add_copy(seq, self.id, &mut self.copies);
                        return Insert::New;
                    }
                    // The engine hash was also an identity record: replace it.
                    blocks.drop_copy(engine, self.id, &mut self.copies);
                    self.identity -= 1;
                    blocks.add_copy(seq, self.id, &mut self.copies);
                    return Insert::Replaced;
                }
            }
        }
        let mut outcome = Insert::New;
        if let Some(old) = self.mapped.get(&engine).copied() {
            if old == seq {
                return Insert::Present;
            }
            self.remove(blocks, engine);
            outcome = Insert::Replaced;
        }
        if blocks.insert(seq, self.id) {
            self.identity += 1;
            return outcome;
        }
        // Held already (as an identity record or under another engine hash).
        match outcome {
            Insert::Replaced => Insert::Merged,
            _ => Insert::Present,
        }
    }

    /// Whether this unit's block-map changes can be deferred into a batch
    /// ([`BlockMap::apply_batch`]): only when no identity record exists, since
    /// identity records are decided by the block map itself.
    pub(crate) fn batchable(&self) -> bool {
        self.identity == 0
    }

    /// [`UnitBlocks::insert`] for an opaque engine hash (`engine != seq`) on a
    /// [`batchable`](Self::batchable) unit: the block-map changes are pushed to `ops`.
    pub(crate) fn insert_deferred(
        &mut self,
        engine: EngineHash,
        seq: SeqHash,
        ops: &mut Vec<Op>,
    ) -> Insert {
        debug_assert!(engine != seq && self.identity == 0);
        table::make_room(&mut self.mapped);
        match self.mapped.entry(engine) {
            Entry::Occupied(o) if *o.get() == seq => Insert::Present,
            Entry::Occupied(mut o) => {
                let old = o.insert(seq);
                ops.extend([(old, false), (seq, true)]);
                Insert::Replaced
            }
            Entry::Vacant(v) => {
                v.insert(seq);
                ops.push((seq, true));
                Insert::New
            }
        }
    }

    /// Sizes an empty unit's table for a first event of `blocks` blocks at once
    /// (one allocation instead of a doubling per power of two on the way). Only
    /// when empty: a later event may re-store resident blocks, and reserving
    /// for those would grow the table early.
    pub(crate) fn reserve_if_empty(&mut self, blocks: usize) {
        if self.mapped.is_empty() {
            self.mapped.reserve(blocks);
        }
    }

    /// Sizes this unit's table for `blocks` resident blocks in all (at most its cap),
    /// so a bulk load does not rehash it at every doubling on the way.
    pub(crate) fn reserve_total(&mut self, blocks: usize) {
        let target = blocks.min(self.cap);
        self.mapped
            .reserve(target.saturating_sub(self.mapped.len()));
    }

    /// [`UnitBlocks::remove`] on a [`batchable`](Self::batchable) unit: the
    /// block-map change is pushed to `ops`.
    pub(crate) fn remove_deferred(
        &mut self,
        engine: EngineHash,
        ops: &mut Vec<Op>,
    ) -> Option<SeqHash> {
        debug_assert!(self.identity == 0);
        let seq = self.mapped.remove(&engine)?;
        self.shrink_if_sparse();
        ops.push((seq, false));
        Some(seq)
    }

    fn shrink_if_sparse(&mut self) {
        table::shrink_if_sparse(&mut self.mapped);
    }

    /// Evicts `engine` from this unit; returns its sequence hash if it was resident.
    pub(crate) fn remove(&mut self, blocks: &BlockMap, engine: EngineHash) -> Option<SeqHash> {
        self.flush(blocks);
        if let Some(seq) = self.mapped.remove(&engine) {
            self.shrink_if_sparse();
            blocks.drop_copy(seq, self.id, &mut self.copies);
            return Some(seq);
        }
        if self.identity > 0 && blocks.drop_copy(engine, self.id, &mut self.copies) {
            self.identity -= 1;
            return Some(engine);
        }
        None
    }

    /// Evicts everything; returns how many blocks were resident.
    pub(crate) fn clear(&mut self, blocks: &BlockMap) -> usize {
        self.flush(blocks);
        let n = self.len();
        for (_, seq) in self.mapped.drain() {
            blocks.remove(seq, self.id);
        }
        self.mapped = Table::default();
        self.copies.clear();
        if self.identity > 0 {
            blocks.remove_unit_everywhere(self.id);
            self.identity = 0;
        }
        n
    }

    pub(crate) fn len(&self) -> usize {
        self.mapped.len() + self.identity
    }

    /// Order-independent digest of the resident sequence hashes (XOR) and the count of
    /// identity-elided blocks (which are not enumerable per unit); for replica comparison.
    pub(crate) fn digest(&self) -> u64 {
        let xor = self.mapped.values().fold(0u64, |acc, s| acc ^ s);
        xor ^ (self.identity as u64).rotate_left(32)
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        table::heap_bytes(&self.mapped)
            + self.copies.heap_bytes()
            + self.deferred.capacity() * std::mem::size_of::<Op>()
    }
}
