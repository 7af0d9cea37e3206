//! Removal and clear: lowering a unit's cuts. A plain unit's removal looks each engine hash
//! up in the table and lowers its cut once per run (offsets grouped by run); a unit with
//! aliases drops names one by one (`names.rs`) and a block's holding only with its last
//! name. While a removal with holes is under way a reader may see the unit without the
//! stretches it keeps (its cut is cleared before the pieces are split off and granted
//! back): the unit looks as if the removal took more than it does, for the length of the
//! call.

use super::names::UnitState;
use super::run::ROOT;
use super::Ctx;
use crate::index::event::Applied;

impl Ctx<'_> {
    /// Blocks named `engine` evicted from the unit; the keys of those it held go to `gone`.
    pub(crate) fn remove(
        &mut self,
        st: &mut UnitState,
        engine: &[u64],
        out: &mut Applied,
        gone: &mut Vec<u64>,
    ) {
        if !st.plain() {
            for &e in engine {
                match self.lookup(st, e) {
                    Some((x, via_alias)) => {
                        out.removed += 1;
                        let key = self.sh.chunks.key_at(x);
                        gone.push(key);
                        if st.unname(x, key, e, via_alias) {
                            self.w.drops.push(x);
                        }
                    }
                    None => out.unchanged += 1,
                }
            }
            self.finish_drops(st);
            self.w.slab.maybe_reset();
            return;
        }
        let sh = self.sh;
        let unit = st.dense;
        let mut offsets = std::mem::take(&mut self.w.offsets);
        offsets.clear();
        let mut removed = std::mem::take(&mut self.w.removed);
        removed.clear();
        let (mut cur, mut start, mut asked) = (ROOT, 0, 0);
        for &e in engine {
            let Some(id) = self.w.slab.lookup(&sh.chunks, e) else {
                continue;
            };
            asked += 1;
            let run = sh.chunks.run_of(id);
            if run != cur {
                if cur != ROOT {
                    self.remove_held(cur, start, unit, &mut offsets, &mut removed);
                }
                cur = run;
                start = sh.runs.get(run).read().start;
            }
            offsets.push(id - start);
        }
        if cur != ROOT {
            self.remove_held(cur, start, unit, &mut offsets, &mut removed);
        }
        // Slots of reclaimed blocks keep their hashes until their chunk is reused.
        for &id in &removed {
            let key = sh.chunks.key_at(id);
            st.uncount(key);
            gone.push(key);
        }
        out.removed += removed.len();
        out.unchanged += engine.len() - removed.len();
        debug_assert!(removed.len() <= asked);
        self.w.offsets = offsets;
        self.w.removed = removed;
        self.w.slab.maybe_reset();
    }

    /// [`Ctx::remove_in`] on `run` (its first block `start`) that also records the removed
    /// block ids; empties `offsets`.
    fn remove_held(
        &mut self,
        run: u32,
        start: u32,
        unit: u32,
        offsets: &mut Vec<u32>,
        removed: &mut Vec<u32>,
    ) {
        self.remove_in(run, unit, offsets);
        removed.extend(offsets.iter().map(|&o| start + o));
        offsets.clear();
    }

    /// `unit` loses positions `offsets` of `run`; `offsets` is left holding the positions
    /// it held (sorted, once each).
    pub(crate) fn remove_in(&mut self, run: u32, unit: u32, offsets: &mut Vec<u32>) {
        let sh = self.sh;
        let mut r = sh.runs.get(run).write();
        let cut = r.cut(unit);
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
            if cut == gone {
                self.forget_holder(run, unit);
            }
            self.reclaim(run);
            return;
        }
        // Holes: keep each remaining stretch as the held prefix of a run of its own.
        r.set_cut(unit, 0);
        drop(r);
        self.forget_holder(run, unit);
        let (mut piece, mut base, mut from) = (run, 0u32, 0u32);
        for o in offsets.iter().copied().chain(std::iter::once(cut)) {
            if o > from {
                if from > base {
                    piece = self.split(piece, from - base);
                    base = from;
                }
                self.set_cut(piece, unit, o - base);
            }
            from = o + 1;
        }
        self.reclaim(piece);
    }

    /// Every block of the unit evicted; returns the entries it had.
    pub(crate) fn clear(&mut self, st: &mut UnitState) -> usize {
        let unit = st.dense;
        let set = self.take_runs(unit);
        let mut touched = Vec::new();
        for run in set.runs {
            let mut r = self.run(run).write();
            if r.len > 0 && r.cut(unit) > 0 {
                r.set_cut(unit, 0);
                touched.push(run);
            }
        }
        for run in touched {
            self.reclaim(run);
        }
        self.w.slab.maybe_reset();
        let n = st.names;
        st.reset();
        n
    }
}
