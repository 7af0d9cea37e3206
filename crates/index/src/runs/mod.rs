//! `RunIndex`: a run-compressed KV index. **Prototype under measurement** (peers bench
//! row "kvrouter RunIndex (prototype)"): not used by the router, single-threaded
//! (`&mut self`), one namespace, engine hashes trusted to be the same on every unit.
//!
//! Layout: every distinct block is stored once in a chunked slab (engine hash, content hash, run;
//! `slab.rs`) and keyed once, by engine hash, in a table of `u32` ids. Blocks are grouped
//! into runs (`tree.rs`): a run is a contiguous slab range along one chain whose positions
//! all have the same holders, kept as `(unit, cut)` pairs ("the unit holds positions
//! `0..cut`"); runs hang off their parent run's last block and are found from it by the
//! content hash of their first block. Storing a chain the tree already has compares the
//! event's engine hashes with the run's array and raises the unit's cut (`store.rs`): work
//! per run, not a keyed operation per block. Removal (`remove.rs`) lowers cuts, splitting a
//! run where a unit keeps a later stretch after a hole; `find` (`find.rs`) walks runs by
//! content hash.

pub mod conc;
mod find;
mod prefix;
mod remove;
mod slab;
mod store;
mod tree;

#[cfg(test)]
mod diff_tests;
#[cfg(test)]
mod tests;

use find::Scratch;
use slab::Slab;
use tree::Tree;

/// Why a store was dropped (entirely, or from the block that failed on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunError {
    /// `parent` is not a block the storing unit holds: nothing was stored.
    UnknownParent,
    /// `engine` and `content` differ in length (one content hash per block): nothing was
    /// stored.
    LengthMismatch,
    /// An engine hash the index knows at another position, or a block whose content the
    /// tree has at this position under another engine hash: the blocks before it were
    /// stored, the rest dropped.
    Conflict,
}

/// The run-compressed index (prototype; see the module doc).
#[derive(Default)]
pub struct RunIndex {
    slab: Slab,
    tree: Tree,
    scratch: Scratch,
    /// Removal's per-run offsets, kept between calls.
    offsets: Vec<u32>,
}

impl RunIndex {
    pub fn new() -> Self {
        Self::default()
    }

    /// Distinct blocks held by at least one unit.
    pub fn distinct_blocks(&self) -> usize {
        self.slab.live()
    }

    /// Runs in the tree.
    pub fn runs(&self) -> usize {
        self.tree.runs.iter().filter(|r| r.len > 0).count()
    }

    /// Heap bytes of the index's tables (capacity, not use).
    pub fn memory_bytes(&self) -> usize {
        self.slab.heap_bytes() + self.tree.heap_bytes() + self.scratch.heap_bytes()
    }
}
