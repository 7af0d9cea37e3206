//! The tree's writer-side structure changes: adding a run, splitting one, granting a unit a
//! cut (and remembering which runs a unit may hold, for `clear`), and reclaiming positions
//! nobody holds. Runs live in an append-only arena of per-run
//! `RwLock`s (the prototype's `tree::Run` inside); first-level runs are keyed in a sharded
//! map. The writer (one at a time, see `mod.rs`) holds at most one lock at any moment,
//! and readers take a run's lock before releasing the one they found it from, so a run id
//! a reader holds is never freed and reused under it. Each change is arranged so that a
//! reader sees the old or the new shape of a run, never a run that lost blocks it still
//! leads to: a split builds the tail first and then shortens the head in one step.

use parking_lot::RwLock;
use smallvec::smallvec;

use super::run::{Run, ROOT};
use super::{Ctx, RunSet};

/// A unit's run set is pruned of runs it no longer holds when it has grown by this many
/// (and doubled) since the last pruning.
const PRUNE_SLACK: usize = 1024;

impl Ctx<'_> {
    #[inline]
    pub(crate) fn run(&self, id: u32) -> &RwLock<Run> {
        self.sh.runs.get(id)
    }

    /// The child of `run` (or of the root) whose first block has key `key`.
    #[inline]
    pub(crate) fn child(&self, run: u32, key: u64) -> Option<u32> {
        if run == ROOT {
            self.sh.root.get(&key).map(|r| *r)
        } else {
            self.run(run).read().child(key)
        }
    }

    /// `unit` may hold `run` from now on: remember it for `clear`.
    pub(crate) fn note_holder(&mut self, run: u32, unit: u32) {
        let set = self.w.unit_runs.entry(unit).or_default();
        if !set.runs.insert(run) || set.runs.len() < 2 * set.pruned + PRUNE_SLACK {
            return;
        }
        let runs = &self.sh.runs;
        set.runs.retain(|&r| runs.get(r).read().cut(unit) > 0);
        set.pruned = set.runs.len();
    }

    /// `unit` no longer holds `run`.
    pub(crate) fn forget_holder(&mut self, run: u32, unit: u32) {
        if let Some(set) = self.w.unit_runs.get_mut(&unit) {
            set.runs.remove(&run);
        }
    }

    /// Sets `unit`'s cut in `run` (0 drops it from the holders).
    pub(crate) fn set_cut(&mut self, run: u32, unit: u32, cut: u32) {
        self.run(run).write().set_cut(unit, cut);
        if cut > 0 {
            self.note_holder(run, unit);
        }
    }

    /// The runs `unit` may hold (taken: the caller drops its holdings).
    pub(crate) fn take_runs(&mut self, unit: u32) -> RunSet {
        self.w.unit_runs.remove(&unit).unwrap_or_default()
    }

    /// The id the next [`Ctx::add`] will use.
    #[inline]
    pub(crate) fn next_run_id(&self) -> u32 {
        self.w.free.last().copied().unwrap_or(self.w.high)
    }

    /// Puts `run` in arena slot `id` and remembers its holders (not linked yet).
    fn install(&mut self, id: u32, run: Run) {
        let holders: smallvec::SmallVec<[u32; 1]> = run.holders.iter().map(|h| h.0).collect();
        *self.run(id).write() = run;
        for u in holders {
            self.note_holder(id, u);
        }
    }

    fn take_id(&mut self) -> u32 {
        match self.w.free.pop() {
            Some(id) => id,
            None => {
                self.w.high += 1;
                self.w.high - 1
            }
        }
    }

    /// Adds `run` (first block key `first`) at [`Ctx::next_run_id`], then links it
    /// under its parent (or the root): readers reach it only once it is whole.
    pub(crate) fn add(&mut self, run: Run, first: u64) -> u32 {
        let parent = run.parent;
        let id = self.take_id();
        self.install(id, run);
        if parent == ROOT {
            self.sh.root.insert(first, id);
        } else {
            self.run(parent).write().children.push((first, id));
        }
        id
    }

    /// Splits `run` before position `k` (`0 < k < len`); returns the tail's id. The tail
    /// (holders past `k`, all the children) is built and published first, the children
    /// re-parented, and only then is the head shortened, with the tail as its only child.
    pub(crate) fn split(&mut self, run: u32, k: u32) -> u32 {
        let (tail, first) = {
            let r = self.run(run).read();
            debug_assert!(0 < k && k < r.len);
            let holders = r.tail_holders(k);
            let start = r.start + k;
            let tail = Run {
                start,
                len: r.len - k,
                parent: run,
                holders,
                children: r.children.clone(),
            };
            (tail, self.sh.chunks.key_at(start))
        };
        let (start, len) = (tail.start, tail.len);
        let t = self.take_id();
        let children = tail.children.clone();
        self.install(t, tail);
        for &(_, ch) in &children {
            self.run(ch).write().parent = t;
        }
        self.sh.chunks.set_run(start, len, t);
        let mut r = self.run(run).write();
        for h in r.holders.iter_mut() {
            h.1 = h.1.min(k);
        }
        r.len = k;
        r.children = smallvec![(first, t)];
        t
    }

    /// Drops the trailing positions of `run` that no unit holds, if it has no children; a
    /// run left empty is deleted (emptied under its lock, then unlinked from its parent,
    /// then its id freed) and its parent looked at the same way.
    pub(crate) fn reclaim(&mut self, mut run: u32) {
        while run != ROOT {
            let (parent, first) = {
                let sh = self.sh;
                let mut r = sh.runs.get(run).write();
                if r.len == 0 || !r.children.is_empty() {
                    return;
                }
                let keep = r.max_cut();
                if keep == r.len {
                    return;
                }
                let (start, len) = (r.start, r.len);
                if keep > 0 {
                    r.len = keep;
                } else {
                    *r = Run {
                        parent: r.parent,
                        ..Run::default()
                    };
                }
                drop(r);
                self.w.slab.reclaim(&sh.chunks, start + keep, len - keep);
                if keep > 0 {
                    return;
                }
                let parent = sh.runs.get(run).read().parent;
                (parent, sh.chunks.key_at(start))
            };
            if parent == ROOT {
                self.sh.root.remove(&first);
            } else {
                let mut p = self.run(parent).write();
                if let Some(i) = p.children.iter().position(|c| c.1 == run) {
                    p.children.swap_remove(i);
                }
            }
            self.run(run).write().parent = ROOT;
            self.w.free.push(run);
            run = parent;
        }
    }
}
