//! `RunIndex::remove` and `RunIndex::clear`: lower units' cuts. A removal that takes a
//! unit's last blocks of a run is one cut change; one that leaves a later stretch held
//! (a hole) splits the run so each stretch the unit keeps starts a run. Positions nobody
//! holds at the end of a childless run are reclaimed (`Tree::reclaim`).

use super::tree::ROOT;
use super::RunIndex;

impl RunIndex {
    /// Blocks `engine` evicted from `unit` (ones it does not hold are ignored).
    pub fn remove(&mut self, unit: u32, engine: &[u64]) {
        let mut offsets = std::mem::take(&mut self.offsets);
        offsets.clear();
        let mut cur = ROOT;
        for &e in engine {
            let Some(id) = self.slab.lookup(e) else {
                continue;
            };
            let run = self.slab.run_of(id);
            if run != cur {
                if cur != ROOT {
                    self.remove_in(cur, unit, &mut offsets);
                    offsets.clear();
                }
                cur = run;
            }
            offsets.push(id - self.tree.runs[run as usize].start);
        }
        if cur != ROOT {
            self.remove_in(cur, unit, &mut offsets);
        }
        self.offsets = offsets;
        self.tree.maybe_compact(&mut self.slab);
    }

    /// `unit` loses positions `offsets` of `run`.
    fn remove_in(&mut self, run: u32, unit: u32, offsets: &mut Vec<u32>) {
        let r = &mut self.tree.runs[run as usize];
        let cut = r.cut(unit);
        if cut == 0 {
            return;
        }
        offsets.retain(|&o| o < cut);
        if offsets.is_empty() {
            return;
        }
        if !offsets.is_sorted() {
            offsets.sort_unstable();
        }
        offsets.dedup();
        let gone = offsets.len() as u32;
        if offsets[0] == cut - gone {
            // A suffix of the unit's holding (leaf-first eviction).
            r.set_cut(unit, cut - gone);
            self.tree.reclaim(&mut self.slab, run);
            return;
        }
        // Holes: keep each remaining stretch as the held prefix of a run of its own.
        r.set_cut(unit, 0);
        let (mut piece, mut base, mut from) = (run, 0u32, 0u32);
        for o in offsets.iter().copied().chain(std::iter::once(cut)) {
            if o > from {
                if from > base {
                    piece = self.tree.split(&mut self.slab, piece, from - base);
                    base = from;
                }
                self.tree.runs[piece as usize].set_cut(unit, o - base);
            }
            from = o + 1;
        }
        self.tree.reclaim(&mut self.slab, piece);
    }

    /// Every block of `unit` evicted.
    pub fn clear(&mut self, unit: u32) {
        let mut touched = Vec::new();
        for (id, r) in self.tree.runs.iter_mut().enumerate() {
            if r.len > 0 && r.cut(unit) > 0 {
                r.set_cut(unit, 0);
                touched.push(id as u32);
            }
        }
        for run in touched {
            self.tree.reclaim(&mut self.slab, run);
        }
        self.tree.maybe_compact(&mut self.slab);
    }
}
