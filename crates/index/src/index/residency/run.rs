//! One run of the tree: a stretch of one chain whose positions all have the same holders,
//! stored as a contiguous range of slab ids, with its holders as `(unit, cut)` pairs and its
//! children keyed by the key of their first block. Plain data; `tree.rs` changes runs under
//! their locks.

use smallvec::{smallvec, SmallVec};

/// The parent of a first-level run (and the position "before the first block").
pub(crate) const ROOT: u32 = u32::MAX;

/// One run. `len == 0` marks a free arena slot.
#[derive(Default, Clone)]
pub(crate) struct Run {
    /// Slab id of the first block; the run's blocks are `start..start + len`.
    pub(crate) start: u32,
    pub(crate) len: u32,
    /// The run this one continues (it hangs off the parent's last block), or [`ROOT`].
    pub(crate) parent: u32,
    /// `(unit, cut)`: the unit holds positions `0..cut` of this run (`cut >= 1`).
    pub(crate) holders: SmallVec<[(u32, u32); 1]>,
    /// `(key of the child's first block, child run)`.
    pub(crate) children: SmallVec<[(u64, u32); 1]>,
}

impl Run {
    /// How many leading positions `unit` holds (0 if none).
    #[inline]
    pub(crate) fn cut(&self, unit: u32) -> u32 {
        self.holders.iter().find(|h| h.0 == unit).map_or(0, |h| h.1)
    }

    /// Sets `unit`'s cut (0 removes it from the holders).
    pub(crate) fn set_cut(&mut self, unit: u32, cut: u32) {
        match self.holders.iter().position(|h| h.0 == unit) {
            Some(i) if cut == 0 => {
                self.holders.swap_remove(i);
            }
            Some(i) => self.holders[i].1 = cut,
            None if cut > 0 => self.holders.push((unit, cut)),
            None => {}
        }
    }

    /// The holders of the positions from `k` on, as a run starting at `k` would hold them.
    pub(crate) fn tail_holders(&self, k: u32) -> SmallVec<[(u32, u32); 1]> {
        self.holders
            .iter()
            .filter(|h| h.1 > k)
            .map(|&(u, c)| (u, c - k))
            .collect()
    }

    pub(crate) fn max_cut(&self) -> u32 {
        self.holders.iter().map(|h| h.1).max().unwrap_or(0)
    }

    #[inline]
    pub(crate) fn child(&self, key: u64) -> Option<u32> {
        self.children.iter().find(|c| c.0 == key).map(|c| c.1)
    }
}

/// A first-level or child run holding `unit` over all of `len` blocks from `start`.
pub(crate) fn new_run(start: u32, len: u32, parent: u32, unit: u32) -> Run {
    Run {
        start,
        len,
        parent,
        holders: smallvec![(unit, len)],
        children: SmallVec::new(),
    }
}
