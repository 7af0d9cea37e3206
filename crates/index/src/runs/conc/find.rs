//! `ConcRunIndex::find`: the prototype's walk (`runs/find.rs`) from any thread. It takes
//! the root map's shard read lock, then each run's read lock on the path, acquiring a run's
//! lock before releasing the one it was found from (so the id cannot be freed and reused
//! in between); no lock is global and none is held across more than two runs. A run the
//! writer emptied meanwhile reads as length 0 and ends the walk. The per-unit scratch is
//! the caller's ([`FindScratch`], one per thread), so a find allocates nothing once warm.

use parking_lot::RwLockReadGuard;

use super::super::tree::{Run, ROOT};
use super::ConcRunIndex;

/// A caller's reusable find state: per unit, the epoch it was last seen in and its slot in
/// the output.
#[derive(Default)]
pub struct FindScratch {
    seen: Vec<u32>,
    slot: Vec<u32>,
    epoch: u32,
    out: Vec<(u32, u32)>,
}

impl FindScratch {
    pub fn new() -> Self {
        Self::default()
    }
}

impl ConcRunIndex {
    /// `(unit, depth)` for every unit holding at least the first block of `content` (as
    /// [`super::super::RunIndex::find`]), in no particular order.
    pub fn find_into<'s>(&self, content: &[u64], sc: &'s mut FindScratch) -> &'s [(u32, u32)] {
        sc.out.clear();
        let Some(&first) = content.first() else {
            return &sc.out;
        };
        sc.epoch = sc.epoch.wrapping_add(1);
        if sc.epoch == 0 {
            sc.seen.fill(0);
            sc.epoch = 1;
        }
        let epoch = sc.epoch;
        let sh = &self.sh;
        let mut guard: RwLockReadGuard<'_, Run> = {
            let Some(id) = sh.root.get(&first) else {
                return &sc.out;
            };
            sh.runs.get(*id).read()
        };
        let (mut depth, mut i) = (0u32, 0usize);
        loop {
            let r = &*guard;
            if r.parent != ROOT && depth == 0 {
                // Freed and reused between the root map and its lock (cannot happen while
                // the map's read lock is held; kept as a cheap guard).
                break;
            }
            let avail = (r.len as usize).min(content.len() - i);
            let m = sh.chunks.content_prefix(r.start, avail, &content[i..]) as u32;
            if m == 0 {
                break;
            }
            for &(u, cut) in &r.holders {
                let u = u as usize;
                if u >= sc.seen.len() {
                    sc.seen.resize(u + 1, 0);
                    sc.slot.resize(u + 1, 0);
                }
                let d = depth + cut.min(m);
                if sc.seen[u] == epoch {
                    let entry = &mut sc.out[sc.slot[u] as usize];
                    if entry.1 == depth {
                        entry.1 = d;
                    }
                } else if depth == 0 {
                    sc.seen[u] = epoch;
                    sc.slot[u] = sc.out.len() as u32;
                    sc.out.push((u as u32, d));
                }
            }
            depth += m;
            i += m as usize;
            if m < r.len || i == content.len() {
                break;
            }
            let Some(c) = r.child(content[i]) else {
                break;
            };
            let next = sh.runs.get(c).read();
            guard = next;
        }
        &sc.out
    }

    /// [`ConcRunIndex::find_into`] with a fresh scratch (tests and one-off calls).
    pub fn find(&self, content: &[u64]) -> Vec<(u32, u32)> {
        let mut sc = FindScratch::new();
        self.find_into(content, &mut sc).to_vec()
    }
}
