//! Per-unit copy counts: how many engine hashes beyond the first make one unit hold one
//! block, so that evicting one copy does not drop a holder whose other copy is resident.
//!
//! An engine can hold the same pages twice under two of its own namespaces that its events
//! do not tell apart: SGLang 0.5.23 keys its radix tree by `(extra_key, cache_salt)` and
//! publishes other hashes for each, but its `BlockStored` names only the salt and the
//! adapter (`mem_cache/events.py` `record_store`), so e.g. an adapter's plain copy and its
//! copy under an `extra_key` are one router block held twice. The block map records a holder
//! once; this table counts the extra copies (empty in the common case).

use super::hashers::IdBuild;
use super::table::{self, Table};
use crate::tokens::SeqHash;

/// Extra copies per block of one unit (see module docs): `n` = held under `n + 1` engine
/// hashes. A block with one copy has no entry.
#[derive(Default)]
pub(crate) struct Copies(Table<SeqHash, u32, IdBuild>);

impl Copies {
    /// One more copy of `seq`, which the unit already holds.
    pub(crate) fn add(&mut self, seq: SeqHash) {
        table::make_room(&mut self.0);
        *self.0.entry(seq).or_insert(0) += 1;
    }

    /// Drops one extra copy of `seq`; false when it has none (its last copy is going).
    #[inline]
    pub(crate) fn take(&mut self, seq: SeqHash) -> bool {
        if self.0.is_empty() {
            return false;
        }
        let Some(n) = self.0.get_mut(&seq) else {
            return false;
        };
        *n -= 1;
        if *n == 0 {
            self.0.remove(&seq);
            table::shrink_if_sparse(&mut self.0);
        }
        true
    }

    pub(crate) fn clear(&mut self) {
        self.0 = Table::default();
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        table::heap_bytes(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_extra_copies_and_forgets_the_last() {
        let mut c = Copies::default();
        assert!(!c.take(7));
        c.add(7);
        c.add(7);
        assert!(c.take(7) && c.take(7));
        assert!(!c.take(7));
        c.add(9);
        c.clear();
        assert!(!c.take(9));
        assert_eq!(c.heap_bytes(), 0);
    }
}
