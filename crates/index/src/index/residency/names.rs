//! Per-unit state of the confirmed residency: the unit's entry count, cap, digest and
//! evictions, and the names (engine hashes) it uses for its blocks where they are not the
//! blocks' canonical ones.
//!
//! A block held by a unit is, by default, held under the block's canonical engine hash (the
//! slab's, see `slab.rs`) and nothing per (block, unit) is stored: the run's cut is the
//! record. Only when a unit names a block otherwise (engines that disagree, a relay sending
//! the router's sequence hash, an engine holding the same pages under two of its own
//! namespaces) does it get entries here: `alias` (engine hash -> block) and `named` (block ->
//! whether the canonical name is also used, and how many aliases). A unit with neither map
//! in use is *plain*, the common case, and takes the per-run fast paths.

use std::collections::HashMap;

use super::super::hashers::MulBuild;

/// How one unit names one block it holds, when not (only) by the canonical engine hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Named {
    /// The unit also uses the block's canonical engine hash.
    pub(crate) canon: bool,
    /// Aliases (entries of [`UnitState::alias`]) naming the block.
    pub(crate) aliases: u32,
}

/// A block whose last name went in this event; its holding is dropped when the event ends
/// (`Ctx::finish_drops`).
pub(crate) const DROPPING: Named = Named {
    canon: false,
    aliases: 0,
};

pub(crate) struct UnitState {
    /// The unit's dense index inside the residency (what runs' holders store).
    pub(crate) dense: u32,
    /// Most entries the unit may hold (see `cap.rs`); checked after each store.
    pub(crate) cap: usize,
    /// Blocks the engine evicted (removal events) since the unit was created.
    pub(crate) evicted: u64,
    /// Resident (block, engine hash) entries: a block held under two names counts twice.
    pub(crate) names: usize,
    /// XOR of the keys (sequence hashes) of those entries, as the block map's digest was
    /// (the conformance harness computes the same from the engine's tree by content).
    pub(crate) digest: u64,
    pub(crate) alias: HashMap<u64, u32, MulBuild>,
    pub(crate) named: HashMap<u32, Named, MulBuild>,
}

impl UnitState {
    pub(crate) fn new(dense: u32, cap: usize) -> Self {
        UnitState {
            dense,
            cap,
            evicted: 0,
            names: 0,
            digest: 0,
            alias: HashMap::default(),
            named: HashMap::default(),
        }
    }

    /// Every block held under its canonical engine hash only.
    #[inline]
    pub(crate) fn plain(&self) -> bool {
        self.named.is_empty()
    }

    /// One more entry, of the block keyed `key` (its sequence hash).
    #[inline]
    pub(crate) fn count(&mut self, key: u64) {
        self.names += 1;
        self.digest ^= key;
    }

    /// One entry fewer, of the block keyed `key`.
    #[inline]
    pub(crate) fn uncount(&mut self, key: u64) {
        self.names = self.names.saturating_sub(1);
        self.digest ^= key;
    }

    /// `e` now names block `b` too (the entry is counted by the caller): `held` = the unit
    /// already holds `b` (under another name), `canonical` = `e` is `b`'s canonical engine hash.
    pub(crate) fn name(&mut self, b: u32, e: u64, held: bool, canonical: bool) {
        if canonical {
            if let Some(n) = self.named.get_mut(&b) {
                n.canon = true;
                if n.aliases == 0 {
                    self.named.remove(&b);
                    self.shrink();
                }
            }
            return;
        }
        self.alias.insert(e, b);
        let n = self.named.entry(b).or_insert(Named {
            canon: held,
            aliases: 0,
        });
        n.aliases += 1;
    }

    /// Drops name `e` of block `b` keyed `key` (`via_alias`: `e` was found in `alias`); true
    /// when it was the unit's last name for `b`, which is then marked [`DROPPING`].
    pub(crate) fn unname(&mut self, b: u32, key: u64, e: u64, via_alias: bool) -> bool {
        self.uncount(key);
        if via_alias {
            self.alias.remove(&e);
        }
        let n = self.named.entry(b).or_insert(Named {
            canon: true,
            aliases: 0,
        });
        if via_alias {
            n.aliases = n.aliases.saturating_sub(1);
        } else {
            n.canon = false;
        }
        if *n == DROPPING {
            return true;
        }
        if n.aliases == 0 {
            // Back to the canonical name alone: the default.
            self.named.remove(&b);
            self.shrink();
        }
        false
    }

    /// Block `b`'s holding was dropped: forget its marker.
    pub(crate) fn dropped(&mut self, b: u32) {
        self.named.remove(&b);
        self.shrink();
    }

    fn shrink(&mut self) {
        if self.named.is_empty() && self.named.capacity() > 0 {
            self.named = HashMap::default();
            self.alias = HashMap::default();
        }
    }

    /// Holds nothing (a clear).
    pub(crate) fn reset(&mut self) {
        self.names = 0;
        self.digest = 0;
        self.alias = HashMap::default();
        self.named = HashMap::default();
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.alias.capacity() * 13 + self.named.capacity() * 13
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_count_and_the_last_one_marks_the_block() {
        let mut s = UnitState::new(0, 10);
        // Block 7 (key 700) held canonically under 70, then copied under alias 71: two
        // entries of one key, which cancel in the digest.
        s.count(700);
        s.name(7, 71, true, false);
        s.count(700);
        assert!(!s.plain());
        assert_eq!((s.names, s.digest), (2, 0));
        assert!(!s.unname(7, 700, 71, true));
        assert!(s.plain(), "back to the canonical name alone");
        assert_eq!(s.digest, 700);
        assert!(s.unname(7, 700, 70, false));
        assert_eq!(s.named.get(&7), Some(&DROPPING));
        s.dropped(7);
        assert!(s.plain());
        assert_eq!((s.names, s.digest), (0, 0));
    }

    #[test]
    fn an_alias_only_block_gains_and_loses_its_canonical_name() {
        let mut s = UnitState::new(0, 10);
        s.name(3, 31, false, false);
        s.count(300);
        s.name(3, 30, true, true);
        s.count(300);
        assert_eq!(
            s.named.get(&3),
            Some(&Named {
                canon: true,
                aliases: 1
            })
        );
        assert!(!s.unname(3, 300, 30, false));
        assert!(s.unname(3, 300, 31, true));
        assert!(s.alias.is_empty());
        s.reset();
        assert!(s.plain());
    }
}
