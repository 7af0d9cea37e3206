//! Prefix-depth search of the pending layer (predicted and in-flight blocks, keyed by
//! sequence hash; the confirmed residency walks its runs instead, `residency/find.rs`).
//!
//! Sequence hashes are chained, and engines evict leaves first, so the units
//! holding block `i` of a request are (nearly always) a subset of those holding
//! block `i - 1`: the holder count is non-increasing along the request. The
//! search therefore gallops on the *count* (exponential then binary search) and
//! fetches and intersects holder sets only where the count changes. A request
//! of D blocks whose holders drop out at k distinct depths costs
//! O((k + 1) log D) lookups instead of D; a request whose holders all keep the
//! whole rest costs one probe of its last block. The price: a unit with a
//! *hole* (a block removed from the middle of its chain while its descendants
//! stay, which leaf-first eviction never does, or seen transiently inside one
//! event batch) is not noticed where the holder count is otherwise unchanged,
//! and its depth can be over-reported.

use super::unit::UnitId;
use crate::tokens::SeqHash;

/// Something that knows, per block, how many and which units hold it.
pub(crate) trait DepthSource {
    fn count(&self, seq: SeqHash) -> usize;
    /// Holders of `seq`, sorted ascending, replacing `out`'s contents.
    fn units(&self, seq: SeqHash, out: &mut Vec<UnitId>);
}

/// One output entry of the search: a unit and its depth, written once when the
/// unit is first seen and raised in place.
pub(crate) trait DepthEntry {
    fn start(unit: UnitId) -> Self;
    fn set_depth(&mut self, depth: u32);
}

impl DepthEntry for (UnitId, u32) {
    #[inline]
    fn start(unit: UnitId) -> Self {
        (unit, 0)
    }
    #[inline]
    fn set_depth(&mut self, depth: u32) {
        self.1 = depth;
    }
}

/// Appends `(unit, depth)` for every unit holding a non-empty prefix of `seqs`
/// (depth = number of leading blocks held). Exits after one lookup when no unit
/// holds the first block.
pub(crate) fn prefix_depths<S: DepthSource + ?Sized, E: DepthEntry>(
    src: &S,
    seqs: &[SeqHash],
    out: &mut Vec<E>,
) {
    if seqs.is_empty() {
        return;
    }
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => search(src, seqs, out, &mut scratch),
        // Re-entered from inside a search (never done today): fresh buffers.
        Err(_) => search(src, seqs, out, &mut Scratch::default()),
    });
}

/// Per-thread buffers of the search, kept between calls so a query does not
/// allocate for its working sets.
#[derive(Default)]
struct Scratch {
    active: Vec<UnitId>,
    here: Vec<UnitId>,
    /// For each active unit, where its entry sits in `out` (entries are written
    /// with the depth of the change point and raised while the unit stays).
    slot: Vec<u32>,
    next: Vec<UnitId>,
    next_slot: Vec<u32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

fn search<S: DepthSource + ?Sized, E: DepthEntry>(
    src: &S,
    seqs: &[SeqHash],
    out: &mut Vec<E>,
    sc: &mut Scratch,
) {
    let n = seqs.len();
    let Scratch {
        active,
        here,
        slot,
        next,
        next_slot,
    } = sc;
    src.units(seqs[0], active);
    if active.is_empty() {
        return;
    }
    // The first block's holders get their entries once the first change point is
    // known (one pass writing final depths; most of them stop there); the units
    // that go on are tracked by their entry's index (`slot`) and raised in place.
    let base = out.len() as u32;
    let mut first = true;
    // Holder count at `pos`, including units that are not active (holes).
    let mut ref_count = active.len();
    let mut pos = 0;
    loop {
        // The common hit holds the whole rest: one probe of the last block settles it.
        if pos + 1 < n && src.count(seqs[n - 1]) == ref_count {
            record(out, active, slot, first, n);
            return;
        }
        // Gallop: lo = last position known to have ref_count holders, hi = first
        // position known to differ (or n; n - 1 is known to differ when probed).
        let (mut lo, mut hi, mut step) = (pos, if pos + 1 < n { n - 1 } else { n }, 1);
        while lo + step < hi {
            let probe = lo + step;
            if src.count(seqs[probe]) == ref_count {
                lo = probe;
                step *= 2;
            } else {
                hi = probe;
                break;
            }
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if src.count(seqs[mid]) == ref_count {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        // Every active unit holds [0, hi).
        record(out, active, slot, first, hi);
        if hi == n {
            return;
        }
        // The holders change at `hi`: the active units that still hold it go on.
        src.units(seqs[hi], here);
        next.clear();
        next_slot.clear();
        if here.len() * 8 < active.len() {
            // Few stay: look each of them up instead of walking all the active ones.
            for u in here.iter() {
                if let Ok(i) = active.binary_search(u) {
                    next.push(*u);
                    next_slot.push(if first { base + i as u32 } else { slot[i] });
                }
            }
        } else {
            let mut j = 0;
            for (i, u) in active.iter().enumerate() {
                while j < here.len() && here[j] < *u {
                    j += 1;
                }
                if j < here.len() && here[j] == *u {
                    next.push(*u);
                    next_slot.push(if first { base + i as u32 } else { slot[i] });
                    j += 1;
                }
            }
        }
        if next.is_empty() {
            return;
        }
        std::mem::swap(active, next);
        std::mem::swap(slot, next_slot);
        first = false;
        ref_count = here.len();
        pos = hi;
    }
}

/// All active units hold the request up to `depth`: on the first round their
/// entries are appended with it, later their entries (`slot`) are raised to it.
#[inline]
fn record<E: DepthEntry>(
    out: &mut Vec<E>,
    active: &[UnitId],
    slot: &[u32],
    first: bool,
    depth: usize,
) {
    if first {
        out.extend(active.iter().map(|&u| {
            let mut e = E::start(u);
            e.set_depth(depth as u32);
            e
        }));
    } else {
        settle(out, slot, depth);
    }
}

/// Raises the depth of every unit in `slot` to `depth`.
#[inline]
fn settle<E: DepthEntry>(out: &mut [E], slot: &[u32], depth: usize) {
    for &i in slot {
        out[i as usize].set_depth(depth as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};

    struct Fake(HashMap<SeqHash, BTreeSet<UnitId>>);

    impl DepthSource for Fake {
        fn count(&self, seq: SeqHash) -> usize {
            self.0.get(&seq).map_or(0, |s| s.len())
        }
        fn units(&self, seq: SeqHash, out: &mut Vec<UnitId>) {
            out.clear();
            out.extend(self.0.get(&seq).into_iter().flatten().copied());
        }
    }

    fn naive(f: &Fake, seqs: &[SeqHash]) -> Vec<(UnitId, u32)> {
        let units: BTreeSet<UnitId> = f.0.values().flatten().copied().collect();
        let mut out = Vec::new();
        for u in units {
            let d = seqs
                .iter()
                .take_while(|s| f.0.get(s).is_some_and(|h| h.contains(&u)))
                .count();
            if d > 0 {
                out.push((u, d as u32));
            }
        }
        out
    }

    #[test]
    fn galloping_equals_a_linear_walk_on_prefix_closed_data() {
        let seqs: Vec<SeqHash> = (100..400).collect();
        // Unit u holds the first depth[u] blocks.
        let depths = [0usize, 1, 2, 3, 17, 64, 65, 128, 255, 299, 300, 300];
        let mut map: HashMap<SeqHash, BTreeSet<UnitId>> = HashMap::new();
        for (u, &d) in depths.iter().enumerate() {
            for s in &seqs[..d] {
                map.entry(*s).or_default().insert(u as UnitId);
            }
        }
        let f = Fake(map);
        for len in [0, 1, 2, 5, 64, 200, 300] {
            let mut got: Vec<(UnitId, u32)> = Vec::new();
            prefix_depths(&f, &seqs[..len], &mut got);
            got.sort_unstable();
            let mut want = naive(&f, &seqs[..len]);
            want.sort_unstable();
            assert_eq!(got, want, "len {len}");
        }
    }

    #[test]
    fn no_holder_of_the_first_block_means_no_result() {
        let f = Fake(HashMap::from([(2, BTreeSet::from([1]))]));
        let mut got: Vec<(UnitId, u32)> = Vec::new();
        prefix_depths(&f, &[1, 2, 3], &mut got);
        assert!(got.is_empty());
    }
}
