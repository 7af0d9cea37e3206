//! `ConcRunIndex`: the run-compressed index (`runs/`, prototype `RunIndex`) made
//! concurrent, `&self` throughout. **Study under measurement**, not used by the router.
//!
//! Sharing: the slab's chunks are atomics in an append-only arena (`slab.rs`, `arena.rs`);
//! every run is a `parking_lot::RwLock` around the prototype's `Run` (start, len, parent,
//! holders, children) in an append-only arena; first-level runs are keyed by content hash
//! in a sharded `DashMap`. Readers (`find`, `find.rs`) take the root shard's read lock and
//! then each run's read lock along their path (hand over hand), never a global lock and
//! never the writer mutex.
//!
//! Writers: `store`, `remove` and `clear` are callable from any thread and serialize on one
//! writer mutex that also owns the writer-only state: the engine-hash table (the
//! prototype's hashbrown table, unchanged: readers never use it), the slab's and the run
//! arena's allocation counters, the free run ids and removal's scratch. Inside, the writer
//! takes one run lock at a time (a write lock for a change, kept for the compare of that
//! run's engine hashes), so a reader waits at most for one run's step, never for an event.
//! Changes are ordered so readers see old or new runs whole (`tree.rs`). The writer mutex is
//! not on the request path; it does make event application single-threaded (an event
//! costs about as much as in the prototype, ~50 M blocks per CPU-second).
//!
//! Not carried over from the prototype: slab compaction (a reader may be reading any live
//! slot). Dead slots are reused a whole chunk at a time, once every block in the chunk is
//! dead (no run covers it then, so no reader reads it); a chunk with one long-lived block
//! stays. Pages are never given back.

mod arena;
mod find;
mod remove;
mod slab;
mod store;
mod tree;

#[cfg(test)]
mod tests;

use dashmap::DashMap;
use parking_lot::{Mutex, RwLock};

pub use find::FindScratch;

use super::tree::Run;
use super::RunError;
use crate::index::hashers::MulBuild;
use arena::Arena;
use slab::{Chunks, SlabWriter};

/// What readers and the writer share.
pub(crate) struct Shared {
    pub(crate) chunks: Chunks,
    pub(crate) runs: Arena<RwLock<Run>>,
    /// First-level runs by the content hash of their first block.
    pub(crate) root: DashMap<u64, u32, MulBuild>,
}

/// The writer's own state, behind the writer mutex.
#[derive(Default)]
pub(crate) struct Writer {
    slab: SlabWriter,
    /// Run ids handed out (the arena's high-water mark) and the freed ones.
    high: u32,
    free: Vec<u32>,
    /// Removal's per-run offsets, kept between calls.
    offsets: Vec<u32>,
}

/// The writer's view while it holds the mutex.
pub(crate) struct Ctx<'a> {
    sh: &'a Shared,
    w: &'a mut Writer,
}

/// The concurrent run index (see the module doc).
pub struct ConcRunIndex {
    sh: Shared,
    writer: Mutex<Writer>,
}

impl Default for ConcRunIndex {
    fn default() -> Self {
        ConcRunIndex {
            sh: Shared {
                chunks: Chunks::default(),
                runs: Arena::new(8),
                root: DashMap::with_hasher(MulBuild::default()),
            },
            writer: Mutex::new(Writer::default()),
        }
    }
}

impl ConcRunIndex {
    pub fn new() -> Self {
        Self::default()
    }

    fn with_writer<R>(&self, f: impl FnOnce(&mut Ctx<'_>) -> R) -> R {
        let mut w = self.writer.lock();
        f(&mut Ctx {
            sh: &self.sh,
            w: &mut w,
        })
    }

    /// Blocks `engine` / `content` stored on `unit` after block `parent` (as
    /// [`super::RunIndex::store`]).
    pub fn store(
        &self,
        unit: u32,
        parent: Option<u64>,
        engine: &[u64],
        content: &[u64],
    ) -> Result<(), RunError> {
        self.with_writer(|c| c.store(unit, parent, engine, content))
    }

    /// Blocks `engine` evicted from `unit`.
    pub fn remove(&self, unit: u32, engine: &[u64]) {
        self.with_writer(|c| c.remove(unit, engine))
    }

    /// Every block of `unit` evicted.
    pub fn clear(&self, unit: u32) {
        self.with_writer(|c| c.clear(unit))
    }

    /// Distinct blocks held by at least one unit.
    pub fn distinct_blocks(&self) -> usize {
        self.writer.lock().slab.live()
    }

    /// Slab chunks handed out so far (tests: churn reuses dead chunks).
    #[cfg(test)]
    pub(crate) fn slab_chunks(&self) -> usize {
        self.writer.lock().slab.chunks()
    }

    /// Runs in the tree.
    pub fn runs(&self) -> usize {
        let high = self.writer.lock().high;
        (0..high)
            .filter(|&id| self.sh.runs.get(id).read().len > 0)
            .count()
    }

    /// Heap bytes of the index's tables (capacity, not use; holders and children that
    /// spilled out of their runs not counted).
    pub fn memory_bytes(&self) -> usize {
        let w = self.writer.lock();
        self.sh.chunks.heap_bytes()
            + self.sh.runs.heap_bytes()
            + w.slab.heap_bytes()
            + w.free.capacity() * 4
            + self.sh.root.len() * 13
    }
}
