//! `RunIndex::find`: walk the runs a request's content hashes follow from the root and give
//! every unit holding its first block the number of leading blocks it holds. A unit's depth
//! only grows in a run that starts where its depth so far ends, so a hole stops it. Cost:
//! the compares along the path plus one visit per holder of each run on it; no allocation
//! (epoch-tagged per-unit scratch).

use super::prefix::common_prefix;
use super::tree::ROOT;
use super::RunIndex;

#[derive(Default)]
pub(crate) struct Scratch {
    /// Per unit: the epoch it was last seen in and its entry in `out`.
    seen: Vec<u32>,
    slot: Vec<u32>,
    epoch: u32,
    out: Vec<(u32, u32)>,
}

impl Scratch {
    pub(crate) fn reserve_unit(&mut self, unit: u32) {
        let n = unit as usize + 1;
        if self.seen.len() < n {
            self.seen.resize(n, 0);
            self.slot.resize(n, 0);
        }
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        (self.seen.capacity() + self.slot.capacity()) * 4 + self.out.capacity() * 8
    }
}

impl RunIndex {
    /// `(unit, depth)` for every unit holding at least the first block of `content` (per-page
    /// content hashes from the root): depth = leading blocks held. In no particular order.
    pub fn find(&mut self, content: &[u64]) -> &[(u32, u32)] {
        let sc = &mut self.scratch;
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
        let (runs, slab) = (&self.tree.runs, &self.slab);
        let mut next = self.tree.child(ROOT, first);
        let (mut depth, mut i) = (0u32, 0usize);
        while let Some(run) = next {
            let r = &runs[run as usize];
            let avail = (r.len as usize).min(content.len() - i);
            let m = common_prefix(slab.contents(r.start, avail), &content[i..i + avail]) as u32;
            if m == 0 {
                break;
            }
            for &(u, cut) in &r.holders {
                let u = u as usize;
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
            next = r.child(content[i]);
        }
        &sc.out
    }
}
