//! `RunIndex::store`: place a stored chain in the tree. Known stretches are matched run by
//! run against the slab's engine hashes and only raise the unit's cut; new blocks are
//! appended to the slab (one keyed insert each) as a new run, or extend the unit's own run
//! when that run is the slab's last.

use super::prefix::common_prefix;
use super::slab::same_chunk;
use super::tree::{new_run, ROOT};
use super::{RunError, RunIndex};

impl RunIndex {
    /// Blocks `engine` (engine hashes) / `content` (per-page content hashes) stored on `unit`,
    /// continuing the chain after block `parent` (an engine hash `unit` holds; `None` = from
    /// the root). Blocks the unit already holds are left as they are.
    pub fn store(
        &mut self,
        unit: u32,
        parent: Option<u64>,
        engine: &[u64],
        content: &[u64],
    ) -> Result<(), RunError> {
        if engine.len() != content.len() {
            return Err(RunError::LengthMismatch);
        }
        let (mut run, mut k) = match parent {
            None => (ROOT, 0),
            Some(p) => {
                let id = self.slab.lookup(p).ok_or(RunError::UnknownParent)?;
                let run = self.slab.run_of(id);
                let r = &self.tree.runs[run as usize];
                let off = id - r.start;
                if r.cut(unit) <= off {
                    return Err(RunError::UnknownParent);
                }
                (run, off + 1)
            }
        };
        self.scratch.reserve_unit(unit);
        let n = engine.len();
        let mut i = 0;
        while i < n {
            if run != ROOT {
                let r = &self.tree.runs[run as usize];
                if k < r.len {
                    let avail = ((r.len - k) as usize).min(n - i);
                    let m =
                        common_prefix(self.slab.engines(r.start + k, avail), &engine[i..i + avail]);
                    if m == 0 {
                        if k == 0 {
                            // Reached by content hash, but the engine names it differently.
                            return Err(RunError::Conflict);
                        }
                        self.tree.split(&mut self.slab, run, k);
                        continue;
                    }
                    (run, k) = self.grant(run, k, k + m as u32, unit);
                    i += m;
                    continue;
                }
            }
            match self.tree.child(run, content[i]) {
                Some(child) => (run, k) = (child, 0),
                None => return self.append(run, unit, &engine[i..], &content[i..]),
            }
        }
        Ok(())
    }

    /// `unit` holds positions `k..end` of `run`; returns the position after them (in the
    /// tail of a split when the unit lacked the positions before `k`).
    fn grant(&mut self, run: u32, k: u32, end: u32, unit: u32) -> (u32, u32) {
        let r = &mut self.tree.runs[run as usize];
        let cut = r.cut(unit);
        if cut >= end {
            return (run, end);
        }
        if cut >= k {
            r.set_cut(unit, end);
            return (run, end);
        }
        let tail = self.tree.split(&mut self.slab, run, k);
        self.tree.runs[tail as usize].set_cut(unit, end - k);
        (tail, end - k)
    }

    /// New blocks after the end of `run` (or at the root): they extend the unit's own run
    /// when it is the slab's last and the unit its only holder, else they start a new run
    /// (one per chunk they span).
    fn append(
        &mut self,
        mut run: u32,
        unit: u32,
        mut engine: &[u64],
        mut content: &[u64],
    ) -> Result<(), RunError> {
        while !engine.is_empty() {
            let take = self.slab.make_room(engine.len());
            let next = self.slab.next_id();
            let (e, c) = (&engine[..take], &content[..take]);
            let extend = run != ROOT && {
                let r = &self.tree.runs[run as usize];
                r.children.is_empty()
                    && r.start + r.len == next
                    && same_chunk(r.start, next)
                    && r.holders.len() == 1
                    && r.holders[0] == (unit, r.len)
            };
            let added = if extend {
                let added = self.slab.append(run, e, c) as u32;
                let r = &mut self.tree.runs[run as usize];
                r.len += added;
                r.holders[0].1 += added;
                added
            } else {
                let id = self.tree.next_id();
                let added = self.slab.append(id, e, c) as u32;
                if added > 0 {
                    self.tree.add(new_run(next, added, run, unit), c[0]);
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
