//! `ConcRunIndex::remove` and `clear`: the prototype's cut lowering (`runs/remove.rs`)
//! under the concurrent layout, one run lock at a time. While a removal with holes is
//! under way a reader may see the unit without the stretches it keeps (its cut is cleared
//! before the pieces are split off and granted back): the unit looks as if the removal
//! took more than it does, for the length of the call.

use super::super::tree::ROOT;
use super::Ctx;

impl Ctx<'_> {
    pub(crate) fn remove(&mut self, unit: u32, engine: &[u64]) {
        let sh = self.sh;
        let mut offsets = std::mem::take(&mut self.w.offsets);
        offsets.clear();
        let mut cur = ROOT;
        let mut start = 0;
        for &e in engine {
            let Some(id) = self.w.slab.lookup(&sh.chunks, e) else {
                continue;
            };
            let run = sh.chunks.run_of(id);
            if run != cur {
                if cur != ROOT {
                    self.remove_in(cur, unit, &mut offsets);
                    offsets.clear();
                }
                cur = run;
                start = sh.runs.get(run).read().start;
            }
            offsets.push(id - start);
        }
        if cur != ROOT {
            self.remove_in(cur, unit, &mut offsets);
        }
        self.w.offsets = offsets;
        self.w.slab.maybe_reset();
    }

    /// `unit` loses positions `offsets` of `run`.
    fn remove_in(&mut self, run: u32, unit: u32, offsets: &mut Vec<u32>) {
        let sh = self.sh;
        let mut r = sh.runs.get(run).write();
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
            drop(r);
            self.reclaim(run);
            return;
        }
        // Holes: keep each remaining stretch as the held prefix of a run of its own.
        r.set_cut(unit, 0);
        drop(r);
        let (mut piece, mut base, mut from) = (run, 0u32, 0u32);
        for o in offsets.iter().copied().chain(std::iter::once(cut)) {
            if o > from {
                if from > base {
                    piece = self.split(piece, from - base);
                    base = from;
                }
                sh.runs.get(piece).write().set_cut(unit, o - base);
            }
            from = o + 1;
        }
        self.reclaim(piece);
    }

    pub(crate) fn clear(&mut self, unit: u32) {
        let sh = self.sh;
        let mut touched = Vec::new();
        for id in 0..self.w.high {
            let mut r = sh.runs.get(id).write();
            if r.len > 0 && r.cut(unit) > 0 {
                r.set_cut(unit, 0);
                touched.push(id);
            }
        }
        for run in touched {
            self.reclaim(run);
        }
        self.w.slab.maybe_reset();
    }
}
