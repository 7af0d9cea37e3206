//! An append-only arena readable from any thread without a lock: slot `i` lives in bucket
//! `b` of `BASE << b` slots, buckets are allocated once (on first use, by whoever gets
//! there first) and never move or shrink, so a `&T` handed out stays valid for the arena's
//! life. 32 buckets cover every `u32` id; an unused bucket costs one empty `OnceLock`.

use std::sync::OnceLock;

const BUCKETS: usize = 32;

pub(crate) struct Arena<T> {
    /// log2 of the first bucket's size.
    base_bits: u32,
    buckets: [OnceLock<Box<[T]>>; BUCKETS],
}

impl<T: Default> Arena<T> {
    pub(crate) fn new(base_bits: u32) -> Self {
        Arena {
            base_bits,
            buckets: std::array::from_fn(|_| OnceLock::new()),
        }
    }

    #[inline]
    fn at(&self, id: u32) -> (usize, usize) {
        let x = u64::from(id) + (1u64 << self.base_bits);
        let b = 63 - x.leading_zeros() - self.base_bits;
        (b as usize, (x - (1u64 << (b + self.base_bits))) as usize)
    }

    /// Slot `id`, allocating its bucket if no one has yet.
    #[inline]
    pub(crate) fn get(&self, id: u32) -> &T {
        let (b, i) = self.at(id);
        let bucket = self.buckets[b].get_or_init(|| {
            let n = 1usize << (b as u32 + self.base_bits);
            (0..n).map(|_| T::default()).collect()
        });
        &bucket[i]
    }

    /// Heap bytes of the allocated buckets.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.buckets
            .iter()
            .filter_map(|b| b.get())
            .map(|b| b.len() * std::mem::size_of::<T>())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::Arena;

    #[test]
    fn ids_map_to_distinct_slots() {
        let a: Arena<std::sync::atomic::AtomicU32> = Arena::new(2);
        for id in 0..1000u32 {
            a.get(id).store(id, std::sync::atomic::Ordering::Relaxed);
        }
        for id in 0..1000u32 {
            assert_eq!(a.get(id).load(std::sync::atomic::Ordering::Relaxed), id);
        }
    }
}
