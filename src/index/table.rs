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
