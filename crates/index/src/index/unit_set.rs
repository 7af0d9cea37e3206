//! A block's holders packed into one u64: up to two unit ids inline, larger
//! sets spilled to a sorted `Vec<UnitId>` in the owning shard's arena.
//!
//! Encoding: bit 63 set -> spilled, low 32 bits index the arena; otherwise low
//! 32 bits are unit `a` and bits 32..63 hold `b + 1` (0 = only `a`), `a < b`.

use super::unit::UnitId;

const SPILL: u64 = 1 << 63;

/// A packed holder set (never empty while stored in a map).
pub(crate) type Packed = u64;

pub(crate) enum View {
    One(UnitId),
    Two(UnitId, UnitId),
    Spilled(u32),
}

#[inline]
pub(crate) fn view(v: Packed) -> View {
    if v & SPILL != 0 {
        return View::Spilled(v as u32);
    }
    let a = v as u32;
    match (v >> 32) as u32 {
        0 => View::One(a),
        bp1 => View::Two(a, bp1 - 1),
    }
}

#[inline]
pub(crate) fn one(a: UnitId) -> Packed {
    u64::from(a)
}

#[inline]
pub(crate) fn two(a: UnitId, b: UnitId) -> Packed {
    let (lo, hi) = if a < b { (a, b) } else { (b, a) };
    (u64::from(hi + 1) << 32) | u64::from(lo)
}

#[inline]
pub(crate) fn spilled(slot: u32) -> Packed {
    SPILL | u64::from(slot)
}

/// Arena of spilled sets (sorted ids) with a free list.
#[derive(Default)]
pub(crate) struct Spill {
    sets: Vec<Vec<UnitId>>,
    free: Vec<u32>,
}

impl Spill {
    pub(crate) fn get(&self, slot: u32) -> &[UnitId] {
        &self.sets[slot as usize]
    }

    pub(crate) fn alloc(&mut self, set: Vec<UnitId>) -> u32 {
        if let Some(slot) = self.free.pop() {
            self.sets[slot as usize] = set;
            slot
        } else {
            self.sets.push(set);
            (self.sets.len() - 1) as u32
        }
    }

    pub(crate) fn release(&mut self, slot: u32) {
        self.sets[slot as usize] = Vec::new();
        if slot as usize + 1 == self.sets.len() {
            self.sets.pop();
        } else {
            self.free.push(slot);
        }
        if self.free.len() == self.sets.len() {
            self.sets = Vec::new();
            self.free = Vec::new();
        }
    }

    /// Inserts `u`; returns false if it was present.
    pub(crate) fn insert(&mut self, slot: u32, u: UnitId) -> bool {
        let set = &mut self.sets[slot as usize];
        match set.binary_search(&u) {
            Ok(_) => false,
            Err(i) => {
                set.insert(i, u);
                true
            }
        }
    }

    /// Removes `u`; repacks inline (and frees the slot) when two holders remain.
    pub(crate) fn remove(&mut self, slot: u32, u: UnitId) -> Removal {
        let set = &mut self.sets[slot as usize];
        let Ok(i) = set.binary_search(&u) else {
            return Removal::Absent;
        };
        set.remove(i);
        if set.len() == 2 {
            let packed = two(set[0], set[1]);
            self.release(slot);
            return Removal::Repacked(packed);
        }
        if set.len() * 4 < set.capacity() {
            set.shrink_to(set.len() * 2);
        }
        Removal::Kept
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.sets.capacity() * std::mem::size_of::<Vec<UnitId>>()
            + self.free.capacity() * 4
            + self.sets.iter().map(|s| s.capacity() * 4).sum::<usize>()
    }
}

pub(crate) enum Removal {
    Absent,
    Kept,
    Repacked(Packed),
}
