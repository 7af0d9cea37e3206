//! The confirmed-residency map: SeqHash -> packed holder set, split in shards
//! behind `parking_lot::RwLock`s so lookups never take a global lock.

use hashbrown::hash_map::Entry;

use parking_lot::RwLock;

use super::copies::Copies;
use super::find::DepthSource;
use super::hashers::IdBuild;
use super::table::{self, Table};
use super::unit::UnitId;
use super::unit_set::{self, Packed, Removal, Spill, View};
use crate::tokens::SeqHash;

const SHARDS: usize = 128;

#[derive(Default)]
struct Shard {
    map: Table<SeqHash, Packed, IdBuild>,
    spill: Spill,
}

thread_local! {
    /// Per-thread buffer of [`BlockMap::apply_batch`]'s shard-grouped ops.
    static SORTED: std::cell::Cell<Vec<Op>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Keeps shards on their own cache lines.
#[repr(align(128))]
#[derive(Default)]
struct Padded(RwLock<Shard>);

/// Sharded SeqHash -> holders map.
pub(crate) struct BlockMap {
    shards: Box<[Padded]>,
}

impl Default for BlockMap {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Padded::default()).collect(),
        }
    }
}

#[inline]
fn shard_of(seq: SeqHash) -> usize {
    // Bits the in-shard table does not use for its bucket index (low bits) or
    // its control bytes (top 7 bits).
    ((seq >> 40) as usize) & (SHARDS - 1)
}

impl Shard {
    /// Adds `unit` as a holder of `seq`; returns false if it already was one.
    fn insert(&mut self, seq: SeqHash, unit: UnitId) -> bool {
        table::make_room(&mut self.map);
        let v = match self.map.entry(seq) {
            Entry::Vacant(e) => {
                e.insert(unit_set::one(unit));
                return true;
            }
            Entry::Occupied(e) => e.into_mut(),
        };
        match unit_set::view(*v) {
            View::One(a) if a == unit => false,
            View::One(a) => {
                *v = unit_set::two(a, unit);
                true
            }
            View::Two(a, b) if a == unit || b == unit => false,
            View::Two(a, b) => {
                let mut set = vec![a, b, unit];
                set.sort_unstable();
                *v = unit_set::spilled(self.spill.alloc(set));
                true
            }
            View::Spilled(slot) => self.spill.insert(slot, unit),
        }
    }

    /// Removes `unit` from the holders of `seq`; returns false if it was not one.
    fn remove(&mut self, seq: SeqHash, unit: UnitId) -> bool {
        let Some(v) = self.map.get_mut(&seq) else {
            return false;
        };
        match unit_set::view(*v) {
            View::One(a) if a == unit => {
                self.map.remove(&seq);
                table::shrink_if_sparse(&mut self.map);
                true
            }
            View::One(_) => false,
            View::Two(a, b) if a == unit || b == unit => {
                *v = unit_set::one(if a == unit { b } else { a });
                true
            }
            View::Two(..) => false,
            View::Spilled(slot) => match self.spill.remove(slot, unit) {
                Removal::Absent => false,
                Removal::Kept => true,
                Removal::Repacked(p) => {
                    *v = p;
                    true
                }
            },
        }
    }
}

/// One deferred change of a batch: add (`true`) or drop (`false`) a copy of a block.
pub(crate) type Op = (SeqHash, bool);

impl Shard {
    /// Adds a copy of `seq` on `unit`: a holder, or one more copy of a block it holds.
    /// Returns true when `unit` became a holder.
    #[inline]
    fn add_copy(&mut self, seq: SeqHash, unit: UnitId, copies: &mut Copies) -> bool {
        let new = self.insert(seq, unit);
        if !new {
            copies.add(seq);
        }
        new
    }

    /// Drops a copy of `seq` on `unit`: one of its extra copies, else the holder itself.
    /// Returns false when `unit` held no copy.
    #[inline]
    fn drop_copy(&mut self, seq: SeqHash, unit: UnitId, copies: &mut Copies) -> bool {
        copies.take(seq) || self.remove(seq, unit)
    }

    #[inline]
    fn apply(&mut self, (seq, add): Op, unit: UnitId, copies: &mut Copies) {
        if add {
            self.add_copy(seq, unit, copies);
        } else {
            self.drop_copy(seq, unit, copies);
        }
    }
}

/// A shard's table is cut into this many regions (log2) for ordering bulk ops: 1,024
/// regions of a 2 MB shard table (10M entries over 128 shards) are 2 KB each, so
/// consecutive inserts stay within a few cache lines and pages.
const REGION_BITS: u32 = 10;

/// Scratch space of [`Regions::order`].
#[derive(Default)]
struct Regions {
    counts: Vec<u32>,
    out: Vec<Op>,
}

impl Regions {
    /// `group` ordered by the region of the table its home bucket (`seq & mask`) lies in:
    /// a counting sort, stable, so changes of one block keep their order. O(n).
    fn order(&mut self, group: &[Op], mask: u64) -> &[Op] {
        let bits = u64::BITS - mask.leading_zeros();
        let shift = bits.saturating_sub(REGION_BITS);
        let region = |seq: SeqHash| ((seq & mask) >> shift) as usize;
        self.counts.clear();
        self.counts.resize((1usize << bits.min(REGION_BITS)) + 1, 0);
        for &(seq, _) in group {
            self.counts[region(seq) + 1] += 1;
        }
        for i in 1..self.counts.len() {
            self.counts[i] += self.counts[i - 1];
        }
        self.out.clear();
        self.out.resize(group.len(), (0, false));
        for &op in group {
            let at = &mut self.counts[region(op.0)];
            self.out[*at as usize] = op;
            *at += 1;
        }
        &self.out
    }
}

impl BlockMap {
    /// Adds `unit` as a holder of `seq`; returns false if it already was one.
    pub(crate) fn insert(&self, seq: SeqHash, unit: UnitId) -> bool {
        self.shards[shard_of(seq)].0.write().insert(seq, unit)
    }

    /// Removes `unit` from the holders of `seq`; returns false if it was not one.
    pub(crate) fn remove(&self, seq: SeqHash, unit: UnitId) -> bool {
        self.shards[shard_of(seq)].0.write().remove(seq, unit)
    }

    /// Adds a copy of `seq` on `unit` (counted in `copies` when it holds one already);
    /// returns true when `unit` became a holder.
    pub(crate) fn add_copy(&self, seq: SeqHash, unit: UnitId, copies: &mut Copies) -> bool {
        self.shards[shard_of(seq)]
            .0
            .write()
            .add_copy(seq, unit, copies)
    }

    /// Drops a copy of `seq` on `unit`: the holder goes with its last copy. Returns false
    /// when `unit` held no copy.
    pub(crate) fn drop_copy(&self, seq: SeqHash, unit: UnitId, copies: &mut Copies) -> bool {
        if copies.take(seq) {
            return true;
        }
        self.remove(seq, unit)
    }

    /// Applies one event's changes for `unit`: ops are grouped by shard with a
    /// counting sort (stable, so changes of one block keep their order) and
    /// each shard's lock is taken once per batch instead of once per block.
    /// `copies` is `unit`'s copy count (an add of a held block is one more copy, a
    /// drop takes one). Empties `ops`.
    pub(crate) fn apply_batch(&self, unit: UnitId, ops: &mut Vec<Op>, copies: &mut Copies) {
        if ops.len() <= 2 {
            for &op in ops.iter() {
                self.shards[shard_of(op.0)]
                    .0
                    .write()
                    .apply(op, unit, copies);
            }
            ops.clear();
            return;
        }
        self.apply_sorted(unit, ops, false, copies);
    }

    /// [`BlockMap::apply_batch`] for a large backlog of one unit's changes (a bulk
    /// load, see `UnitBlocks::set_bulk`): within each shard the ops are also ordered
    /// by their bucket in the shard's table (stable, so changes of one block keep
    /// their order), so the inserts walk the table's memory forwards instead of
    /// jumping at random (a cache and TLB miss each on a table of hundreds of MB).
    /// Empties `ops`.
    pub(crate) fn apply_bulk(&self, unit: UnitId, ops: &mut Vec<Op>, copies: &mut Copies) {
        self.apply_sorted(unit, ops, true, copies);
    }

    fn apply_sorted(&self, unit: UnitId, ops: &mut Vec<Op>, by_bucket: bool, copies: &mut Copies) {
        let mut start = [0u32; SHARDS + 1];
        for &(seq, _) in ops.iter() {
            start[shard_of(seq) + 1] += 1;
        }
        for i in 0..SHARDS {
            start[i + 1] += start[i];
        }
        SORTED.with(|cell| {
            let mut sorted = cell.take();
            sorted.clear();
            sorted.resize(ops.len(), (0, false));
            let mut at = start;
            for &op in ops.iter() {
                let s = shard_of(op.0);
                sorted[at[s] as usize] = op;
                at[s] += 1;
            }
            self.apply_grouped(unit, &sorted, &start, by_bucket, copies);
            if by_bucket {
                // A bulk load's buffer is large: do not keep it per thread.
                sorted = Vec::new();
            }
            cell.set(sorted);
        });
        ops.clear();
    }

    /// Applies `sorted` ops, shard `s` owning `sorted[start[s]..start[s + 1]]`.
    fn apply_grouped(
        &self,
        unit: UnitId,
        sorted: &[Op],
        start: &[u32; SHARDS + 1],
        by_bucket: bool,
        copies: &mut Copies,
    ) {
        let mut regions = Regions::default();
        for s in 0..SHARDS {
            let mut group: &[Op] = &sorted[start[s] as usize..start[s + 1] as usize];
            if group.is_empty() {
                continue;
            }
            let mut shard = self.shards[s].0.write();
            if by_bucket {
                group = regions.order(group, table::bucket_mask(&shard.map));
            }
            // Changes of one block are in one shard, in order: its copy count stays exact.
            for &op in group {
                shard.apply(op, unit, copies);
            }
        }
    }

    /// Whether `unit` holds `seq`.
    pub(crate) fn holds(&self, seq: SeqHash, unit: UnitId) -> bool {
        let shard = self.shards[shard_of(seq)].0.read();
        match shard.map.get(&seq).map(|v| unit_set::view(*v)) {
            None => false,
            Some(View::One(a)) => a == unit,
            Some(View::Two(a, b)) => a == unit || b == unit,
            Some(View::Spilled(slot)) => shard.spill.get(slot).binary_search(&unit).is_ok(),
        }
    }

    /// Removes `unit` from every block (a full scan, for clears of units whose
    /// blocks are not listed elsewhere).
    pub(crate) fn remove_unit_everywhere(&self, unit: UnitId) {
        for padded in self.shards.iter() {
            let mut seqs = Vec::new();
            {
                let shard = padded.0.read();
                for (seq, v) in shard.map.iter() {
                    let held = match unit_set::view(*v) {
                        View::One(a) => a == unit,
                        View::Two(a, b) => a == unit || b == unit,
                        View::Spilled(slot) => shard.spill.get(slot).binary_search(&unit).is_ok(),
                    };
                    if held {
                        seqs.push(*seq);
                    }
                }
            }
            for seq in seqs {
                self.remove(seq, unit);
            }
        }
    }

    /// Distinct blocks held by at least one unit.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.read().map.len()).sum()
    }

    /// Heap bytes of the map (table buckets incl. control bytes, spill arenas).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = s.0.read();
                table::heap_bytes(&s.map) + s.spill.heap_bytes()
            })
            .sum()
    }
}

impl DepthSource for BlockMap {
    #[inline]
    fn count(&self, seq: SeqHash) -> usize {
        let shard = self.shards[shard_of(seq)].0.read();
        match shard.map.get(&seq).map(|v| unit_set::view(*v)) {
            None => 0,
            Some(View::One(_)) => 1,
            Some(View::Two(..)) => 2,
            Some(View::Spilled(slot)) => shard.spill.get(slot).len(),
        }
    }

    fn units(&self, seq: SeqHash, out: &mut Vec<UnitId>) {
        out.clear();
        let shard = self.shards[shard_of(seq)].0.read();
        match shard.map.get(&seq).map(|v| unit_set::view(*v)) {
            None => {}
            Some(View::One(a)) => out.push(a),
            Some(View::Two(a, b)) => out.extend([a, b]),
            Some(View::Spilled(slot)) => out.extend_from_slice(shard.spill.get(slot)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_order_by_home_bucket_and_keep_one_block_s_changes_in_order() {
        let mut r = Regions::default();
        let mask = (1u64 << 14) - 1; // 16 buckets per region
        let ops = [
            (5 << 4, true),
            (3, true),
            (5 << 4, false),
            (1 << 13, true),
            (17, false),
        ];
        let got = r.order(&ops, mask).to_vec();
        assert_eq!(
            got,
            vec![
                (3, true),
                (17, false),
                (5 << 4, true),
                (5 << 4, false),
                (1 << 13, true)
            ]
        );
        // An unallocated table (mask 0): one region, order kept.
        assert_eq!(r.order(&ops, 0), &ops);
    }

    #[test]
    fn bulk_ops_apply_like_batched_ones() {
        let bulk = BlockMap::default();
        let batched = BlockMap::default();
        let (mut bulk_copies, mut batched_copies) = (Copies::default(), Copies::default());
        for round in 0..3u64 {
            let key = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let mut ops: Vec<Op> = (0..5_000u64)
                .map(|i| (key(i), (i + round) % 3 != 0))
                .collect();
            // The same block twice in one batch: the later change wins.
            ops.extend((0..500u64).map(|i| (key(i * 3), round % 2 == 0)));
            let mut copy = ops.clone();
            bulk.apply_bulk(1, &mut ops, &mut bulk_copies);
            batched.apply_batch(1, &mut copy, &mut batched_copies);
            assert!(ops.is_empty() && copy.is_empty());
        }
        assert_eq!(bulk.len(), batched.len());
        assert!(bulk.len() > 1_000);
        for i in 0..5_000u64 {
            let seq = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            assert_eq!(bulk.holds(seq, 1), batched.holds(seq, 1), "{i}");
        }
    }

    #[test]
    fn sets_grow_inline_then_spill_and_shrink_back() {
        let m = BlockMap::default();
        let mut out = Vec::new();
        for u in [5, 1, 9, 3] {
            assert!(m.insert(42, u));
            assert!(!m.insert(42, u));
        }
        m.units(42, &mut out);
        assert_eq!(out, vec![1, 3, 5, 9]);
        assert_eq!(m.count(42), 4);
        assert!(m.remove(42, 9));
        assert!(!m.remove(42, 9));
        assert!(m.remove(42, 1));
        m.units(42, &mut out);
        assert_eq!(out, vec![3, 5]);
        assert!(m.remove(42, 3));
        assert_eq!(m.count(42), 1);
        assert!(m.remove(42, 5));
        assert_eq!(m.count(42), 0);
        assert_eq!(m.len(), 0);
    }
}
