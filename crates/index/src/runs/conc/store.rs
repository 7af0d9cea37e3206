//! `ConcRunIndex::store`'s walk, the prototype's (`runs/store.rs`) under the concurrent
//! layout: each run step compares the event's engine hashes with the run's and reads the
//! next child under the run's read lock, and takes its write lock only to raise the unit's
//! cut (readers of the run never wait for a compare); new blocks go to the
//! slab first and become visible when a run's length is raised or a new run is linked.

use super::super::tree::{new_run, ROOT};
use super::super::RunError;
use super::slab::same_chunk;
use super::Ctx;

/// What one step in a run decided, taken out of the run's lock.
enum Step {
    /// Held through position `k` of the same run (`m` more blocks matched); `true`: the
    /// unit's cut must be raised to `k` first.
    Advance(u32, usize, bool),
    /// Continue at the start of this child run.
    Child(u32),
    /// Split before `k`, then (if `Some`) grant the unit `k..k + m` in the tail.
    Split(u32, Option<usize>),
    /// Nothing further in the tree: append the rest here.
    Append,
}

impl Ctx<'_> {
    pub(crate) fn store(
        &mut self,
        unit: u32,
        parent: Option<u64>,
        engine: &[u64],
        content: &[u64],
    ) -> Result<(), RunError> {
        assert_eq!(engine.len(), content.len(), "one content hash per block");
        let sh = self.sh;
        let chunks = &sh.chunks;
        let (mut run, mut k) = match parent {
            None => (ROOT, 0),
            Some(p) => {
                let id = self
                    .w
                    .slab
                    .lookup(chunks, p)
                    .ok_or(RunError::UnknownParent)?;
                let run = chunks.run_of(id);
                let r = self.run(run).read();
                let off = id - r.start;
                if r.cut(unit) <= off {
                    return Err(RunError::UnknownParent);
                }
                (run, off + 1)
            }
        };
        let n = engine.len();
        let mut i = 0;
        while i < n {
            let step = if run == ROOT {
                match self.child(ROOT, content[i]) {
                    Some(c) => Step::Child(c),
                    None => Step::Append,
                }
            } else {
                // A read lock for the compare (only this writer changes runs, so what it reads
                // stays true until it writes); the write lock only to raise the cut.
                let r = sh.runs.get(run).read();
                if k < r.len {
                    let avail = ((r.len - k) as usize).min(n - i);
                    let m = chunks.engine_prefix(r.start + k, avail, &engine[i..i + avail]);
                    let end = k + m as u32;
                    let cut = r.cut(unit);
                    if m == 0 {
                        if k == 0 {
                            // Reached by content hash, but the engine names it differently.
                            return Err(RunError::Conflict);
                        }
                        Step::Split(k, None)
                    } else if cut >= end {
                        Step::Advance(end, m, false)
                    } else if cut >= k {
                        Step::Advance(end, m, true)
                    } else {
                        Step::Split(k, Some(m))
                    }
                } else {
                    match r.child(content[i]) {
                        Some(c) => Step::Child(c),
                        None => Step::Append,
                    }
                }
            };
            match step {
                Step::Advance(end, m, raise) => {
                    if raise {
                        sh.runs.get(run).write().set_cut(unit, end);
                    }
                    k = end;
                    i += m;
                }
                Step::Child(c) => (run, k) = (c, 0),
                Step::Split(at, None) => {
                    self.split(run, at);
                }
                Step::Split(at, Some(m)) => {
                    let tail = self.split(run, at);
                    self.run(tail).write().set_cut(unit, m as u32);
                    (run, k) = (tail, m as u32);
                    i += m;
                }
                Step::Append => return self.append(run, unit, &engine[i..], &content[i..]),
            }
        }
        Ok(())
    }

    /// New blocks after the end of `run` (or at the root): they extend the unit's own run
    /// when it is the slab's last and the unit its only holder, else start a new run (one
    /// per chunk they span).
    fn append(
        &mut self,
        mut run: u32,
        unit: u32,
        mut engine: &[u64],
        mut content: &[u64],
    ) -> Result<(), RunError> {
        let sh = self.sh;
        let chunks = &sh.chunks;
        while !engine.is_empty() {
            let take = self.w.slab.make_room(engine.len());
            let next = self.w.slab.next_id();
            let (e, c) = (&engine[..take], &content[..take]);
            let extend = run != ROOT && {
                let r = self.run(run).read();
                r.children.is_empty()
                    && r.start + r.len == next
                    && same_chunk(r.start, next)
                    && r.holders.len() == 1
                    && r.holders[0] == (unit, r.len)
            };
            let added = if extend {
                let added = self.w.slab.append(chunks, run, e, c) as u32;
                let mut r = self.run(run).write();
                r.len += added;
                r.holders[0].1 += added;
                added
            } else {
                let id = self.next_run_id();
                let added = self.w.slab.append(chunks, id, e, c) as u32;
                if added > 0 {
                    self.add(new_run(next, added, run, unit), c[0]);
                    run = id;
                }
                added
            };
            if (added as usize) < take {
                return Err(RunError::Conflict);
            }
            engine = &engine[take..];
            content = &content[take..];
        }
        Ok(())
    }
}
