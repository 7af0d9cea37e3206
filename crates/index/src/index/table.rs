//! The index's hash tables (hashbrown, with the caller's u64 hasher): exact
//! heap bytes from the allocation itself, and the shrink-on-evict policy.
//!
//! Why not `HashMap::capacity()`: in hashbrown it is `len + growth_left`, and
//! removals that leave tombstones lower `growth_left` without freeing buckets,
//! so under churn a table can hold 4x more buckets than its capacity says
//! (and a `len * 4 < capacity()` shrink check never fires).

use std::hash::BuildHasher;

pub(crate) type Table<K, V, S> = hashbrown::HashMap<K, V, S>;

/// Heap bytes of `map` (buckets, control bytes, padding).
#[inline]
pub(crate) fn heap_bytes<K: Eq + std::hash::Hash, V, S: BuildHasher>(
    map: &Table<K, V, S>,
) -> usize {
    map.allocation_size()
}

/// Buckets of `map`, derived from its allocation.
#[inline]
fn buckets<K: Eq + std::hash::Hash, V, S: BuildHasher>(map: &Table<K, V, S>) -> usize {
    map.allocation_size() / (std::mem::size_of::<(K, V)>() + 1)
}

/// `buckets - 1` of `map` (0 when unallocated): the bits of a key's hash that pick
/// its home bucket, for ordering bulk inserts by position in the table. Assumes
/// the hasher's output is the key itself or any fixed function of it (the order
/// only has to follow the table's home buckets, not be exact, to walk forwards).
#[inline]
pub(crate) fn bucket_mask<K: Eq + std::hash::Hash, V, S: BuildHasher>(map: &Table<K, V, S>) -> u64 {
    let b = buckets(map);
    if b == 0 {
        return 0;
    }
    // `buckets` floors the allocation's size; the table's count is a power of two.
    (1u64 << b.ilog2()) - 1
}

/// Before an insert: when tombstones (not live entries) have used up the
/// growth budget of a table filled above 7/16, hashbrown would double it; a
/// rebuild at the same bucket count clears the tombstones instead. Under
/// eviction churn this keeps tables at their pre-churn load instead of
/// drifting to 0.22-0.44 after each tombstone-driven doubling. O(len), paid
/// once per growth budget consumed (as hashbrown's own in-place rehash).
#[inline]
pub(crate) fn make_room<K, V, S>(map: &mut Table<K, V, S>)
where
    K: Eq + std::hash::Hash,
    S: BuildHasher + Clone,
{
    if map.capacity() != map.len() {
        return; // growth budget left
    }
    let b = buckets(map);
    let (len, full) = (map.len(), b / 8 * 7);
    if b >= 16 && len < full && len * 16 > b * 7 {
        let mut fresh = Table::with_capacity_and_hasher(len + 1, map.hasher().clone());
        fresh.extend(map.drain());
        *map = fresh;
    }
}

/// After a removal: when live entries fill less than 3/10 of the buckets,
/// rebuild at the smallest power of two holding them at <= 7/8 load (about
/// 0.6 right after); an empty table frees its allocation. Growth doubles at
/// 7/8 (or, under churn, when tombstones run out above 7/16), so the two
/// thresholds do not chase each other on every operation.
#[inline]
pub(crate) fn shrink_if_sparse<K, V, S>(map: &mut Table<K, V, S>)
where
    K: Eq + std::hash::Hash,
    S: BuildHasher,
{
    let len = map.len();
    let b = buckets(map);
    if b > 0 && (len == 0 || (b > 16 && len * 10 < b * 3)) {
        map.shrink_to(len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::hashers::MulBuild;

    fn churn(steps: u64, room: bool) -> (usize, usize) {
        let mut m: Table<u64, u64, MulBuild> = Table::default();
        let live = 700u64; // a 1024-bucket table at 0.68 load
        for k in 0..live {
            m.insert(k, k);
        }
        let filled = heap_bytes(&m);
        for k in live..live + steps {
            if room {
                make_room(&mut m);
            }
            m.insert(k, k);
            m.remove(&(k - live));
            shrink_if_sparse(&mut m);
        }
        assert_eq!(m.len(), live as usize);
        (filled, heap_bytes(&m))
    }

    #[test]
    fn churn_keeps_the_bucket_count_when_tombstones_are_cleared() {
        let (filled, after) = churn(50_000, true);
        assert_eq!(after, filled);
        // Without `make_room`, hashbrown doubles on tombstones at this load.
        let (filled, after) = churn(50_000, false);
        assert!(after > filled, "{after} vs {filled}");
    }

    #[test]
    fn sparse_tables_shrink_and_empty_ones_free() {
        let mut m: Table<u64, u64, MulBuild> = (0..1000u64).map(|k| (k, k)).collect();
        let full = heap_bytes(&m);
        for k in 0..900 {
            m.remove(&k);
            shrink_if_sparse(&mut m);
        }
        assert!(heap_bytes(&m) * 4 <= full, "{} vs {full}", heap_bytes(&m));
        for k in 900..1000 {
            m.remove(&k);
            shrink_if_sparse(&mut m);
        }
        assert_eq!(heap_bytes(&m), 0);
    }
}
