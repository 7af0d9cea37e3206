//! The confirmed residency behind [`super::KvIndex`]: which blocks each unit holds, as a
//! tree of runs (issue 26's run-compressed design, built and measured as `runs/conc/`, now
//! serving the router).
//!
//! Blocks are identified by the router's sequence hash (the *key*: content, position and
//! namespace, as the chain starts from the namespace key), so `find_matches` keeps taking the
//! request's sequence hashes. Every distinct block is stored once in a slab (`slab.rs`: its
//! canonical engine hash, its key, its run); blocks are grouped into runs (`run.rs`): a
//! contiguous stretch of one chain whose positions all have the same holders, kept as `(unit,
//! cut)` pairs ("holds positions `0..cut`"). A store walks the tree comparing the event's
//! keys with a run's, eight at a time, and raises the unit's cut: work per run, not per block
//! (`store.rs`); only new blocks are appended and named in the engine-hash table. Removal
//! lowers cuts, splitting a run where a unit keeps a later stretch (`remove.rs`); `find`
//! walks runs by key (`find.rs`); per-unit names, counts, cap and digest are in `names.rs`.
//!
//! Sharing: the slab's pages are atomics in an append-only arena (`arena.rs`); every run is
//! a `parking_lot::RwLock` in another; first-level runs are keyed in a sharded `DashMap`.
//! Readers take the root shard's read lock, then each run's read lock on their path (hand
//! over hand): no global lock, never the writer mutex.
//!
//! Writers: `store`, `remove` and `clear` serialize on one writer mutex, which owns the
//! writer-only state: the engine-hash table, per-unit state, the slab's and run arena's
//! allocation, free run ids. Inside, the writer holds one run lock at a time; changes are
//! ordered so readers see old or new runs whole (`tree.rs`). A slot is dead once no run covers
//! it and is reused at once, from merged free ranges (`slab.rs`; `runs/conc/` reused only
//! whole dead chunks, which fragmented under mixed lifetimes); pages are never given back to
//! the allocator.
//!
//! Units are stored in runs by a dense index (assigned once per (worker, rank) and never
//! reused, so a reader never attributes a depth to the wrong unit), mapped back to the unit
//! through an arena readers share.

mod arena;
mod find;
mod names;
mod remove;
mod run;
mod slab;
mod store;
mod tree;

#[cfg(test)]
mod conc_tests;
#[cfg(test)]
mod run_tests;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

use dashmap::DashMap;
use parking_lot::{Mutex, RwLock};

use super::error::IndexError;
use super::event::Applied;
use super::hashers::MulBuild;
use super::unit::UnitId;
use crate::tokens::{next_seq, SeqHash};
use arena::Arena;
use names::UnitState;
use run::{Run, ROOT};
use slab::{Chunks, SlabWriter};

/// One store event, hashed: `engine[i]` names the block whose content hash is `locals[i]`,
/// after the unit's block `parent` (an engine hash; `None`: the chain starts, after
/// `namespace`).
pub(crate) struct Stored<'a> {
    pub(crate) parent: Option<u64>,
    pub(crate) namespace: Option<SeqHash>,
    pub(crate) engine: &'a [u64],
    pub(crate) locals: &'a [u64],
}

/// What readers and the writer share.
pub(crate) struct Shared {
    pub(crate) chunks: Chunks,
    pub(crate) runs: Arena<RwLock<Run>>,
    /// First-level runs by the key of their first block.
    pub(crate) root: DashMap<u64, u32, MulBuild>,
    /// Dense unit index -> unit id.
    pub(crate) units: Arena<AtomicU32>,
    /// This residency's number in the process (finds cache unit ids per residency).
    pub(crate) instance: u64,
}

/// The next [`Shared::instance`] (from 1: a fresh find scratch owns none).
static INSTANCES: AtomicU64 = AtomicU64::new(1);

/// The runs one unit may hold (a superset: ids of runs it left are dropped lazily), so a
/// clear visits them instead of the whole tree.
#[derive(Default)]
pub(crate) struct RunSet {
    runs: HashSet<u32, MulBuild>,
    /// Size after the last pruning.
    pruned: usize,
}

/// The writer's tree state, behind the writer mutex.
#[derive(Default)]
pub(crate) struct Core {
    slab: SlabWriter,
    /// Run ids handed out (the arena's high-water mark) and the freed ones.
    high: u32,
    free: Vec<u32>,
    /// Per dense unit index: the runs it may hold.
    unit_runs: HashMap<u32, RunSet, MulBuild>,
    /// Scratch kept between calls: removal's per-run offsets, removed ids, unnamed new
    /// blocks, blocks whose holding a store or removal drops at its end.
    offsets: Vec<u32>,
    removed: Vec<u32>,
    unnamed: Vec<usize>,
    drops: Vec<u32>,
}

/// Everything behind the writer mutex.
#[derive(Default)]
struct Writer {
    core: Core,
    units: HashMap<UnitId, UnitState, MulBuild>,
    /// Dense index of every unit ever seen (never reused).
    dense: HashMap<UnitId, u32, MulBuild>,
}

/// The writer's view of the tree while it holds the mutex.
pub(crate) struct Ctx<'a> {
    sh: &'a Shared,
    w: &'a mut Core,
}

/// The confirmed residency (see the module doc).
pub(crate) struct Residency {
    sh: Shared,
    writer: Mutex<Writer>,
    /// Resident (block, unit) entries, readable without the writer.
    resident: AtomicI64,
}

impl Default for Residency {
    fn default() -> Self {
        Residency {
            sh: Shared {
                chunks: Chunks::default(),
                runs: Arena::new(8),
                root: DashMap::with_hasher(MulBuild::default()),
                units: Arena::new(6),
                instance: INSTANCES.fetch_add(1, Ordering::Relaxed),
            },
            writer: Mutex::new(Writer::default()),
            resident: AtomicI64::new(0),
        }
    }
}

/// Unit `id`'s state, created with the cap `cap()` if new.
fn unit_state<'a>(
    units: &'a mut HashMap<UnitId, UnitState, MulBuild>,
    dense: &mut HashMap<UnitId, u32, MulBuild>,
    sh: &Shared,
    id: UnitId,
    cap: impl FnOnce() -> usize,
) -> &'a mut UnitState {
    units.entry(id).or_insert_with(|| {
        let next = dense.len() as u32;
        let d = *dense.entry(id).or_insert_with(|| {
            sh.units.get(next).store(id, Ordering::Relaxed);
            next
        });
        UnitState::new(d, cap())
    })
}

impl Residency {
    /// Blocks `ev` stored on unit `id` (created with the cap `cap()` if new). The blocks'
    /// sequence hashes are left in `seqs`. A store past the unit's cap clears the unit.
    pub(crate) fn store(
        &self,
        id: UnitId,
        cap: impl FnOnce() -> usize,
        ev: Stored<'_>,
        seqs: &mut Vec<SeqHash>,
    ) -> Result<Applied, IndexError> {
        let Stored {
            parent,
            namespace,
            engine,
            locals,
        } = ev;
        debug_assert_eq!(engine.len(), locals.len());
        let mut guard = self.writer.lock();
        let w = &mut *guard;
        let st = unit_state(&mut w.units, &mut w.dense, &self.sh, id, cap);
        let mut ctx = Ctx {
            sh: &self.sh,
            w: &mut w.core,
        };
        let (at, mut prev) = match parent {
            None => ((ROOT, 0), namespace),
            Some(p) => match ctx.lookup(st, p) {
                Some((b, _)) => {
                    let run = self.sh.chunks.run_of(b);
                    let start = self.sh.runs.get(run).read().start;
                    ((run, b - start + 1), Some(self.sh.chunks.key_at(b)))
                }
                None => return Err(IndexError::UnknownParent { parent: p }),
            },
        };
        seqs.clear();
        seqs.extend(locals.iter().map(|&l| {
            let s = next_seq(prev, l);
            prev = Some(s);
            s
        }));
        let before = st.names;
        let mut out = Applied::default();
        ctx.store(st, at, engine, seqs, &mut out);
        let blocks = st.names;
        let mut delta = blocks as i64 - before as i64;
        let result = if blocks > st.cap {
            // More than the worker can hold: stop trusting this unit's view (the events
            // layer marks it recovering) rather than grow without bound.
            let cap = st.cap;
            delta -= ctx.clear(st) as i64;
            Err(IndexError::CapExceeded { blocks, cap })
        } else {
            Ok(out)
        };
        self.resident.fetch_add(delta, Ordering::Relaxed);
        result
    }

    /// Blocks `engine` evicted from unit `id`; the sequence hashes of those it held are
    /// pushed to `gone`. Unknown engine hashes count as unchanged; `None`: no such unit.
    pub(crate) fn remove(
        &self,
        id: UnitId,
        engine: &[u64],
        gone: &mut Vec<SeqHash>,
    ) -> Option<Applied> {
        let mut guard = self.writer.lock();
        let w = &mut *guard;
        let st = w.units.get_mut(&id)?;
        let mut ctx = Ctx {
            sh: &self.sh,
            w: &mut w.core,
        };
        let mut out = Applied::default();
        ctx.remove(st, engine, &mut out, gone);
        st.evicted += out.removed as u64;
        self.resident
            .fetch_sub(out.removed as i64, Ordering::Relaxed);
        Some(out)
    }

    /// Removes every block of unit `id`; `forget` also drops the unit's state. Returns the
    /// entries removed.
    pub(crate) fn clear(&self, id: UnitId, forget: bool) -> usize {
        let mut guard = self.writer.lock();
        let w = &mut *guard;
        let Some(st) = w.units.get_mut(&id) else {
            return 0;
        };
        let mut ctx = Ctx {
            sh: &self.sh,
            w: &mut w.core,
        };
        let removed = ctx.clear(st);
        if forget {
            w.units.remove(&id);
        }
        self.resident.fetch_sub(removed as i64, Ordering::Relaxed);
        removed
    }

    /// Resident (block, unit) entries.
    pub(crate) fn resident(&self) -> usize {
        self.resident.load(Ordering::Relaxed).max(0) as usize
    }

    pub(crate) fn has_unit(&self, id: UnitId) -> bool {
        self.writer.lock().units.contains_key(&id)
    }

    /// `f(state)` of unit `id`, if it exists.
    fn with_unit<R>(&self, id: UnitId, f: impl FnOnce(&UnitState) -> R) -> Option<R> {
        self.writer.lock().units.get(&id).map(f)
    }

    pub(crate) fn unit_blocks(&self, id: UnitId) -> usize {
        self.with_unit(id, |u| u.names).unwrap_or(0)
    }

    /// XOR of the keys (sequence hashes) of the unit's entries (0 when empty).
    pub(crate) fn unit_digest(&self, id: UnitId) -> u64 {
        self.with_unit(id, |u| u.digest).unwrap_or(0)
    }

    pub(crate) fn unit_cap(&self, id: UnitId) -> Option<usize> {
        self.with_unit(id, |u| u.cap)
    }

    /// Sets the cap of every existing unit in `range`.
    pub(crate) fn set_cap(&self, range: std::ops::RangeInclusive<UnitId>, cap: usize) {
        for (_, u) in self
            .writer
            .lock()
            .units
            .iter_mut()
            .filter(|(id, _)| range.contains(id))
        {
            u.cap = cap;
        }
    }

    /// Units in `range`.
    pub(crate) fn units_in(&self, range: std::ops::RangeInclusive<UnitId>) -> Vec<UnitId> {
        let w = self.writer.lock();
        w.units
            .keys()
            .copied()
            .filter(|id| range.contains(id))
            .collect()
    }

    /// Every unit's entries and evictions.
    pub(crate) fn turnover(&self) -> Vec<(UnitId, usize, u64)> {
        let w = self.writer.lock();
        w.units
            .iter()
            .map(|(id, u)| (*id, u.names, u.evicted))
            .collect()
    }

    /// Distinct blocks held by at least one unit: per run, the positions below its highest
    /// cut (positions nobody holds stay in the tree while they lead to held ones, after a
    /// hole). Walks every run under the writer mutex: for diagnostics, not the request path.
    pub(crate) fn distinct_blocks(&self) -> usize {
        let w = self.writer.lock();
        (0..w.core.high)
            .map(|id| {
                let r = self.sh.runs.get(id).read();
                r.max_cut().min(r.len) as usize
            })
            .sum()
    }

    /// Blocks in the slab, held or not (tests: everything is reclaimed once nothing is held).
    #[cfg(test)]
    pub(crate) fn slab_live(&self) -> usize {
        self.writer.lock().core.slab.live()
    }

    /// Runs in the tree (tests).
    #[cfg(test)]
    pub(crate) fn runs(&self) -> usize {
        let high = self.writer.lock().core.high;
        (0..high)
            .filter(|&id| self.sh.runs.get(id).read().len > 0)
            .count()
    }

    /// Slab chunks handed out so far (tests: churn reuses dead chunks).
    #[cfg(test)]
    pub(crate) fn slab_chunks(&self) -> usize {
        self.writer.lock().core.slab.chunks()
    }

    /// Heap bytes (capacities; holders and children spilled out of their runs not counted).
    pub(crate) fn memory_bytes(&self) -> usize {
        let w = self.writer.lock();
        let units: usize = w.units.values().map(UnitState::heap_bytes).sum::<usize>()
            + w.units.capacity() * (std::mem::size_of::<UnitState>() + 5)
            + w.dense.capacity() * 9;
        let run_sets: usize = w
            .core
            .unit_runs
            .values()
            .map(|s| s.runs.capacity() * 5 + 24)
            .sum();
        self.sh.chunks.heap_bytes()
            + self.sh.runs.heap_bytes()
            + self.sh.units.heap_bytes()
            + w.core.slab.heap_bytes()
            + w.core.free.capacity() * 4
            + self.sh.root.len() * 13
            + units
            + run_sets
    }
}
