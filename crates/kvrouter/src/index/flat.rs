//! The index's hash tables: u64 -> u64, open addressing with Robin Hood linear
//! probing and backward-shift deletion (no tombstones, so no drift under
//! churn), power-of-two slot arrays indexed by the key's top bits.
//!
//! Why not hashbrown: ingest must *prefetch* a key's slot before probing it
//! (one event stores hundreds of blocks at random addresses; issuing the loads
//! together overlaps their cache misses), which needs the slot address, and
//! top-bit indexing makes growth stream through memory in order. Heap bytes are
//! exact (`slots * 16`); a sparse table shrinks after removals and an empty one
//! frees its allocation.

use std::marker::PhantomData;

use super::prefetch::prefetch;

/// How a key is spread before its top bits pick the home slot.
pub(crate) trait KeyMix {
    fn mix(key: u64) -> u64;
}

/// Sequence hashes: already uniform xxh3 outputs.
pub(crate) struct Uniform;

impl KeyMix for Uniform {
    #[inline(always)]
    fn mix(key: u64) -> u64 {
        key
    }
}

/// Opaque engine hashes, which may be sequential: Fibonacci hashing.
pub(crate) struct Mixed;

impl KeyMix for Mixed {
    #[inline(always)]
    fn mix(key: u64) -> u64 {
        key.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}

/// Key 0 marks an empty slot; a real key 0 lives in `zero`.
const EMPTY: u64 = 0;
/// Grow above 7/8 load (Robin Hood keeps probes short there).
const MAX_NUM: usize = 7;
const MAX_DEN: usize = 8;
const MIN_SLOTS: usize = 8;

pub(crate) struct Flat<M> {
    slots: Box<[(u64, u64)]>,
    /// `64 - log2(slots.len())` (unused while `slots` is empty).
    shift: u32,
    len: usize,
    zero: Option<u64>,
    _mix: PhantomData<M>,
}

impl<M> Default for Flat<M> {
    fn default() -> Self {
        Self {
            slots: Box::default(),
            shift: 64,
            len: 0,
            zero: None,
            _mix: PhantomData,
        }
    }
}

impl<M: KeyMix> Flat<M> {
    #[inline(always)]
    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    #[inline(always)]
    fn home(&self, key: u64) -> usize {
        // shift < 64 whenever slots are allocated.
        (M::mix(key) >> self.shift) as usize
    }

    /// Probe distance of `key` sitting in slot `i`.
    #[inline(always)]
    fn dist(&self, i: usize, key: u64) -> usize {
        i.wrapping_sub(self.home(key)) & self.mask()
    }

    pub(crate) fn len(&self) -> usize {
        self.len + usize::from(self.zero.is_some())
    }

    /// Heap bytes (the slot array).
    pub(crate) fn heap_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.slots)
    }

    /// Hints the CPU to load `key`'s home slot.
    #[inline(always)]
    pub(crate) fn prefetch(&self, key: u64) {
        if !self.slots.is_empty() {
            prefetch(&self.slots[self.home(key)]);
        }
    }

    #[inline]
    fn find(&self, key: u64) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.mask();
        let mut i = self.home(key);
        let mut d = 0;
        loop {
            let k = self.slots[i].0;
            if k == key {
                return Some(i);
            }
            if k == EMPTY || self.dist(i, k) < d {
                return None;
            }
            i = (i + 1) & mask;
            d += 1;
        }
    }

    #[inline]
    pub(crate) fn get(&self, key: u64) -> Option<u64> {
        if key == EMPTY {
            return self.zero;
        }
        self.find(key).map(|i| self.slots[i].1)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, key: u64) -> Option<&mut u64> {
        if key == EMPTY {
            return self.zero.as_mut();
        }
        self.find(key).map(|i| &mut self.slots[i].1)
    }

    /// Inserts `key`, which must be absent.
    #[inline]
    pub(crate) fn insert_new(&mut self, key: u64, value: u64) {
        debug_assert!(self.get(key).is_none());
        if key == EMPTY {
            self.zero = Some(value);
            return;
        }
        if (self.len + 1) * MAX_DEN > self.slots.len() * MAX_NUM {
            self.resize((self.slots.len() * 2).max(MIN_SLOTS));
        }
        self.place(key, value);
        self.len += 1;
    }

    /// Robin Hood placement of an absent key (room guaranteed).
    #[inline]
    fn place(&mut self, mut key: u64, mut value: u64) {
        let mask = self.mask();
        let mut i = self.home(key);
        let mut d = 0;
        loop {
            let k = self.slots[i].0;
            if k == EMPTY {
                self.slots[i] = (key, value);
                return;
            }
            let kd = self.dist(i, k);
            if kd < d {
                (key, value) = std::mem::replace(&mut self.slots[i], (key, value));
                d = kd;
            }
            i = (i + 1) & mask;
            d += 1;
        }
    }

    /// Removes `key`; returns its value. Shrinks a table left sparse.
    pub(crate) fn remove(&mut self, key: u64) -> Option<u64> {
        if key == EMPTY {
            let v = self.zero.take();
            self.shrink_if_sparse();
            return v;
        }
        let mut i = self.find(key)?;
        let value = self.slots[i].1;
        let mask = self.mask();
        loop {
            let j = (i + 1) & mask;
            let k = self.slots[j].0;
            if k == EMPTY || self.dist(j, k) == 0 {
                break;
            }
            self.slots[i] = self.slots[j];
            i = j;
        }
        self.slots[i] = (EMPTY, 0);
        self.len -= 1;
        self.shrink_if_sparse();
        Some(value)
    }

    /// Below 3/10 load, rebuild at the smallest power of two holding the live
    /// entries at <= 5/8 (growth happens at 7/8, so the two do not chase each
    /// other); an empty table frees its allocation.
    fn shrink_if_sparse(&mut self) {
        let n = self.slots.len();
        if self.len == 0 && n > 0 {
            self.slots = Box::default();
            self.shift = 64;
        } else if n > 16 && self.len * 10 < n * 3 {
            let want = (self.len * 8).div_ceil(5).next_power_of_two().max(MIN_SLOTS);
            if want < n {
                self.resize(want);
            }
        }
    }

    /// Rebuilds with `slots` slots (a power of two that holds every entry).
    fn resize(&mut self, slots: usize) {
        let old = std::mem::replace(&mut self.slots, vec![(EMPTY, 0); slots].into_boxed_slice());
        self.shift = 64 - slots.trailing_zeros();
        // Top-bit homes keep their order across sizes: the rebuild writes in
        // (nearly) ascending slot order.
        for &(k, v) in old.iter() {
            if k != EMPTY {
                self.place(k, v);
            }
        }
    }

    /// Every (key, value), in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.zero
            .map(|v| (EMPTY, v))
            .into_iter()
            .chain(self.slots.iter().copied().filter(|s| s.0 != EMPTY))
    }

    /// Empties the table, freeing its allocation; returns the entries.
    pub(crate) fn take_all(&mut self) -> Vec<(u64, u64)> {
        let all = self.iter().collect();
        *self = Self::default();
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn splitmix(mut x: u64) -> u64 {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }

    fn check<M: KeyMix>(keys: impl Fn(u64) -> u64) {
        let mut t: Flat<M> = Flat::default();
        let mut model: HashMap<u64, u64> = HashMap::new();
        for step in 0..40_000u64 {
            let r = splitmix(step);
            let k = keys(r % 3_000);
            match r >> 60 {
                0..=8 => {
                    if let Some(v) = t.get_mut(k) {
                        *v = step;
                    } else {
                        t.insert_new(k, step);
                    }
                    model.insert(k, step);
                }
                _ => assert_eq!(t.remove(k), model.remove(&k)),
            }
            assert_eq!(t.len(), model.len());
            if step % 997 == 0 {
                for (k, v) in &model {
                    assert_eq!(t.get(*k), Some(*v));
                }
                let mut all: Vec<_> = t.iter().collect();
                all.sort_unstable();
                let mut want: Vec<_> = model.iter().map(|(k, v)| (*k, *v)).collect();
                want.sort_unstable();
                assert_eq!(all, want);
            }
        }
        for k in model.keys().copied().collect::<Vec<_>>() {
            assert_eq!(t.remove(k), model.remove(&k));
        }
        assert_eq!(t.heap_bytes(), 0, "an emptied table frees its slots");
    }

    #[test]
    fn matches_a_hash_map_under_random_inserts_and_removals() {
        check::<Uniform>(splitmix); // uniform keys
        check::<Mixed>(|k| k); // sequential keys, key 0 included
    }

    #[test]
    fn churn_keeps_the_size_and_sparse_tables_shrink() {
        let mut t: Flat<Uniform> = Flat::default();
        let live = 700u64;
        for k in 1..=live {
            t.insert_new(splitmix(k), k);
        }
        let filled = t.heap_bytes();
        for k in live + 1..live + 50_000 {
            t.insert_new(splitmix(k), k);
            assert_eq!(t.remove(splitmix(k - live)), Some(k - live));
        }
        assert_eq!(t.heap_bytes(), filled, "no tombstones, no drift");
        let keys: Vec<u64> = t.iter().map(|(k, _)| k).collect();
        for k in &keys[..600] {
            t.remove(*k);
        }
        assert!(t.heap_bytes() * 4 <= filled, "{}", t.heap_bytes());
    }
}
