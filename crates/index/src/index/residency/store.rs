//! A store's walk: place a stored chain in the tree and name its blocks for the unit. Each
//! run step compares the event's keys (sequence hashes) with the run's under the run's read
//! lock (only the writer changes runs, so what it read stays true), then raises the unit's
//! cut with one write lock: work per run, not per block, for a plain unit whose engine
//! hashes are the blocks' canonical ones (checked eight at a time against the slab). Other
//! names go through the unit's alias maps (`names.rs`), block by block. New blocks go to the
//! slab first and become visible when a run's length is raised or a new run is linked.
//!
//! An engine hash the unit already uses for another block moves to the new one (a known
//! engine hash with new content replaces the old block); the old block's holding is dropped
//! when the store ends (`Ctx::finish_drops`), so the walk's position stays valid.

use super::names::{UnitState, DROPPING};
use super::run::{new_run, ROOT};
use super::slab::{same_chunk, DEAD, NO_NAME};
use super::Ctx;
use crate::index::event::Applied;

/// What one step in a run decided, taken out of the run's lock.
enum Step {
    /// Blocks `first..first + m` (positions `k..k + m` of the run) match; the unit's cut
    /// there is `cut`.
    Stretch { first: u32, m: usize, cut: u32 },
    /// Continue at the start of this child run.
    Child(u32),
    /// The chain leaves the run before position `k`: split there.
    Split(u32),
    /// Nothing further in the tree: append the rest here.
    Append,
}

impl Ctx<'_> {
    /// Whether `unit` holds block `b` (by its run's cut).
    pub(crate) fn holds(&self, unit: u32, b: u32) -> bool {
        let run = self.sh.chunks.run_of(b);
        if run == DEAD || run == ROOT {
            return false;
        }
        let r = self.run(run).read();
        b >= r.start && b - r.start < r.cut(unit).min(r.len)
    }

    /// The block the unit holds under engine hash `e`, and whether `e` is an alias there.
    pub(crate) fn lookup(&self, st: &UnitState, e: u64) -> Option<(u32, bool)> {
        if let Some(&b) = st.alias.get(&e) {
            return Some((b, true));
        }
        let b = self.w.slab.lookup(&self.sh.chunks, e)?;
        if st.named.get(&b).is_some_and(|n| !n.canon) {
            return None;
        }
        self.holds(st.dense, b).then_some((b, false))
    }

    /// Blocks named `engine` with keys `keys` stored on the unit, from position `k` of run
    /// `run` (`(ROOT, 0)`: from the root).
    pub(crate) fn store(
        &mut self,
        st: &mut UnitState,
        (mut run, mut k): (u32, u32),
        engine: &[u64],
        keys: &[u64],
        out: &mut Applied,
    ) {
        let unit = st.dense;
        let sh = self.sh;
        let n = engine.len();
        let mut i = 0;
        while i < n {
            let step = if run == ROOT {
                match self.child(ROOT, keys[i]) {
                    Some(c) => Step::Child(c),
                    None => Step::Append,
                }
            } else {
                let r = sh.runs.get(run).read();
                if k < r.len {
                    let avail = ((r.len - k) as usize).min(n - i);
                    let m = sh
                        .chunks
                        .key_prefix(r.start + k, avail, &keys[i..i + avail]);
                    if m == 0 {
                        // Reached by key, so only after a parent inside the run.
                        Step::Split(k)
                    } else {
                        Step::Stretch {
                            first: r.start + k,
                            m,
                            cut: r.cut(unit),
                        }
                    }
                } else {
                    match r.child(keys[i]) {
                        Some(c) => Step::Child(c),
                        None => Step::Append,
                    }
                }
            };
            match step {
                Step::Stretch { first, m, cut } => {
                    let end = k + m as u32;
                    let held = cut.saturating_sub(k).min(m as u32) as usize;
                    self.name_stretch(st, first, held, &engine[i..i + m], out);
                    if cut >= k {
                        if cut < end {
                            self.set_cut(run, unit, end);
                        }
                        k = end;
                    } else {
                        // Holds less of the run than where the chain enters it.
                        let tail = self.split(run, k);
                        self.set_cut(tail, unit, m as u32);
                        (run, k) = (tail, m as u32);
                    }
                    i += m;
                }
                Step::Child(c) => (run, k) = (c, 0),
                Step::Split(at) => {
                    self.split(run, at);
                }
                Step::Append => {
                    self.append(st, run, &engine[i..], &keys[i..], out);
                    break;
                }
            }
        }
        self.finish_drops(st);
    }

    /// Names blocks `first..first + engine.len()` `engine` for the unit, which holds the
    /// first `held` of them already (under some name).
    fn name_stretch(
        &mut self,
        st: &mut UnitState,
        first: u32,
        held: usize,
        engine: &[u64],
        out: &mut Applied,
    ) {
        let m = engine.len();
        if st.plain()
            && self.sh.chunks.engine_prefix(first, m, engine) == m
            && !engine.contains(&NO_NAME)
        {
            // Every name canonical (a slot's `NO_NAME` is never one): the held ones are
            // present, the rest new.
            out.unchanged += held;
            out.stored += m - held;
            for j in held..m {
                st.count(self.sh.chunks.key_at(first + j as u32));
            }
            return;
        }
        for (j, &e) in engine.iter().enumerate() {
            let b = first + j as u32;
            if let Some((x, via_alias)) = self.lookup(st, e) {
                if x == b {
                    out.unchanged += 1;
                    continue;
                }
                if st.unname(x, self.sh.chunks.key_at(x), e, via_alias) {
                    self.w.drops.push(x);
                }
            }
            let canonical = e != NO_NAME && self.sh.chunks.engine_at(b) == e;
            let held_now = j < held || st.named.get(&b).is_some_and(|n| *n != DROPPING);
            st.name(b, e, held_now, canonical);
            st.count(self.sh.chunks.key_at(b));
            out.stored += 1;
        }
    }

    /// New blocks after the end of `run` (or at the root): they extend the unit's own run
    /// when it is the slab's last and the unit its only holder, else start a new run (one
    /// per chunk they span).
    fn append(
        &mut self,
        st: &mut UnitState,
        mut run: u32,
        mut engine: &[u64],
        mut keys: &[u64],
        out: &mut Applied,
    ) {
        let unit = st.dense;
        let sh = self.sh;
        let chunks = &sh.chunks;
        if !st.plain() {
            // Names this unit uses for other blocks move to the new ones.
            for &e in engine {
                if let Some((x, via_alias)) = self.lookup(st, e) {
                    if st.unname(x, self.sh.chunks.key_at(x), e, via_alias) {
                        self.w.drops.push(x);
                    }
                }
            }
        }
        while !engine.is_empty() {
            let take = self.w.slab.make_room(engine.len());
            let next = self.w.slab.next_id();
            let (e, c) = (&engine[..take], &keys[..take]);
            let extend = run != ROOT && {
                let r = self.run(run).read();
                r.children.is_empty()
                    && r.start + r.len == next
                    && same_chunk(r.start, next)
                    && r.holders.len() == 1
                    && r.holders[0] == (unit, r.len)
            };
            let mut unnamed = std::mem::take(&mut self.w.unnamed);
            unnamed.clear();
            if extend {
                self.w.slab.append(chunks, run, e, c, &mut unnamed);
                let mut r = self.run(run).write();
                r.len += take as u32;
                r.holders[0].1 += take as u32;
            } else {
                let id = self.next_run_id();
                self.w.slab.append(chunks, id, e, c, &mut unnamed);
                self.add(new_run(next, take as u32, run, unit), c[0]);
                run = id;
            }
            for &key in c {
                st.count(key);
            }
            out.stored += take;
            for &j in &unnamed {
                // The name is another block's canonical one: an alias here (and, if the
                // unit held that block under it, the name moves).
                let (b, name) = (next + j as u32, e[j]);
                if let Some((x, via_alias)) = self.lookup(st, name) {
                    // Counted above for the new block; `unname` takes the old entry's.
                    if x != b && st.unname(x, chunks.key_at(x), name, via_alias) {
                        self.w.drops.push(x);
                    }
                }
                st.name(b, name, false, false);
            }
            self.w.unnamed = unnamed;
            engine = &engine[take..];
            keys = &keys[take..];
        }
    }

    /// Drops the holdings of the blocks whose last name this event took.
    pub(crate) fn finish_drops(&mut self, st: &mut UnitState) {
        if self.w.drops.is_empty() {
            return;
        }
        let drops = std::mem::take(&mut self.w.drops);
        let mut offsets = Vec::with_capacity(1);
        for &x in &drops {
            if st.named.get(&x) != Some(&DROPPING) {
                // Named again since.
                continue;
            }
            st.dropped(x);
            let run = self.sh.chunks.run_of(x);
            if run == DEAD {
                continue;
            }
            let start = self.run(run).read().start;
            offsets.clear();
            offsets.push(x - start);
            self.remove_in(run, st.dense, &mut offsets);
        }
        self.w.drops = drops;
        self.w.drops.clear();
    }
}
