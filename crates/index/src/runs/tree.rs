//! The tree of runs: a run is a stretch of one chain whose positions all have the same
//! holders, stored as a contiguous range of slab ids. It owns the run arena, the root's
//! child table, splitting a run in two, and reclaiming positions nobody holds.

use hashbrown::HashMap;
use smallvec::{smallvec, SmallVec};

use super::slab::Slab;
use crate::index::hashers::MulBuild;

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
    /// `(content hash of the child's first block, child run)`.
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
    pub(crate) fn child(&self, content: u64) -> Option<u32> {
        self.children.iter().find(|c| c.0 == content).map(|c| c.1)
    }
}

#[derive(Default)]
pub(crate) struct Tree {
    pub(crate) runs: Vec<Run>,
    free: Vec<u32>,
    /// First-level runs by the content hash of their first block.
    pub(crate) root: HashMap<u64, u32, MulBuild>,
}

impl Tree {
    /// The child of `run` (or of the root) whose first block has content `content`.
    #[inline]
    pub(crate) fn child(&self, run: u32, content: u64) -> Option<u32> {
        if run == ROOT {
            self.root.get(&content).copied()
        } else {
            self.runs[run as usize].child(content)
        }
    }

    /// The id the next [`Tree::add`] will use.
    #[inline]
    pub(crate) fn next_id(&self) -> u32 {
        self.free.last().copied().unwrap_or(self.runs.len() as u32)
    }

    /// Adds run `run` (hanging off `parent`, first block content `first`) at id
    /// [`Tree::next_id`].
    pub(crate) fn add(&mut self, run: Run, first: u64) -> u32 {
        let parent = run.parent;
        let id = match self.free.pop() {
            Some(id) => {
                self.runs[id as usize] = run;
                id
            }
            None => {
                self.runs.push(run);
                self.runs.len() as u32 - 1
            }
        };
        if parent == ROOT {
            self.root.insert(first, id);
        } else {
            self.runs[parent as usize].children.push((first, id));
        }
        id
    }

    /// Splits `run` before position `k` (`0 < k < len`): the tail becomes a new run, the only
    /// child of the head, and takes over the children; holders keep their cuts on both sides.
    /// Returns the tail's id.
    pub(crate) fn split(&mut self, slab: &mut Slab, run: u32, k: u32) -> u32 {
        let r = &mut self.runs[run as usize];
        debug_assert!(0 < k && k < r.len);
        let holders = r.tail_holders(k);
        for h in r.holders.iter_mut() {
            h.1 = h.1.min(k);
        }
        let children = std::mem::take(&mut r.children);
        let (start, len) = (r.start + k, r.len - k);
        r.len = k;
        let first = slab.content_at(start);
        let tail = Run {
            start,
            len,
            parent: run,
            holders,
            children,
        };
        let t = self.add(tail, first);
        for i in 0..self.runs[t as usize].children.len() {
            let ch = self.runs[t as usize].children[i].1;
            self.runs[ch as usize].parent = t;
        }
        slab.set_run(start, len, t);
        t
    }

    /// Drops the trailing positions of `run` that no unit holds, if it has no children; a run
    /// left empty is deleted and its parent looked at the same way.
    pub(crate) fn reclaim(&mut self, slab: &mut Slab, mut run: u32) {
        while run != ROOT {
            let r = &mut self.runs[run as usize];
            if r.len == 0 || !r.children.is_empty() {
                return;
            }
            let keep = r.max_cut();
            if keep == r.len {
                return;
            }
            for id in r.start + keep..r.start + r.len {
                slab.reclaim(id);
            }
            if keep > 0 {
                r.len = keep;
                return;
            }
            let (parent, first) = (r.parent, slab.content_at(r.start));
            *r = Run::default();
            self.free.push(run);
            if parent == ROOT {
                self.root.remove(&first);
            } else {
                let p = &mut self.runs[parent as usize];
                if let Some(i) = p.children.iter().position(|c| c.1 == run) {
                    p.children.swap_remove(i);
                }
            }
            run = parent;
        }
    }

    /// Compacts the slab once more than half of it is reclaimed (and always when nothing
    /// is live, so an emptied index gives its memory back).
    pub(crate) fn maybe_compact(&mut self, slab: &mut Slab) {
        let dead = slab.dead();
        if dead == 0 || (slab.live() > 0 && (dead < 4096 || dead * 2 < slab.used())) {
            return;
        }
        if slab.live() == 0 {
            *slab = Slab::default();
            *self = Tree::default();
            return;
        }
        let ranges: Vec<(u32, u32, u32)> = self
            .runs
            .iter()
            .enumerate()
            .filter(|(_, r)| r.len > 0)
            .map(|(i, r)| (i as u32, r.start, r.len))
            .collect();
        let (new, starts) = slab.compact(&ranges);
        *slab = new;
        for (&(r, _, _), s) in ranges.iter().zip(starts) {
            self.runs[r as usize].start = s;
        }
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        let spilled: usize = self
            .runs
            .iter()
            .map(|r| {
                (if r.holders.spilled() {
                    r.holders.capacity() * 8
                } else {
                    0
                }) + if r.children.spilled() {
                    r.children.capacity() * 16
                } else {
                    0
                }
            })
            .sum();
        self.runs.capacity() * std::mem::size_of::<Run>()
            + self.free.capacity() * 4
            + self.root.capacity() * 13
            + spilled
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
