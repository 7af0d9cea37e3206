//! `find`: a request's confirmed depth per unit, walking runs by key (the request's
//! sequence hashes) from any thread. It takes the root map's shard read lock, then each run's
//! read lock on the path, acquiring a run's lock before releasing the one it was found from
//! (so the id cannot be freed and reused in between); no lock is global and none is held
//! across more than two runs. A run the writer emptied meanwhile reads as length 0 and ends
//! the walk. A unit's depth only grows in a run that starts where its depth so far ends: a
//! hole (a block removed from the middle of a unit's chain) stops it, exactly. Per-thread
//! scratch, so a find allocates nothing but its answer once warm.

use std::cell::RefCell;
use std::sync::atomic::Ordering;

use parking_lot::RwLockReadGuard;

use super::run::{Run, ROOT};
use super::Residency;
use crate::index::overlap::UnitOverlap;
use crate::index::unit::Unit;

/// A thread's reusable find state: per dense unit, the epoch it was last seen in, its slot
/// in the output and its unit id (read once from the shared arena: a dense index names one
/// unit for the residency's life, so the copy never goes stale while `owner` is the same).
#[derive(Default)]
struct Scratch {
    seen: Vec<u32>,
    slot: Vec<u32>,
    unit: Vec<u32>,
    /// The residency (`Shared::instance`) whose unit ids `unit` holds.
    owner: u64,
    epoch: u32,
    out: Vec<(u32, u32)>,
}

/// `unit` entry not read yet.
const UNREAD: u32 = u32::MAX;

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

impl Residency {
    /// Appends a [`UnitOverlap`] (confirmed depth only) for every unit holding at least the
    /// first block of `keys`, in no particular order.
    pub(crate) fn find(&self, keys: &[u64], out: &mut Vec<UnitOverlap>) {
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut sc) => self.find_with(keys, &mut sc, out),
            Err(_) => self.find_with(keys, &mut Scratch::default(), out),
        });
    }

    fn find_with(&self, keys: &[u64], sc: &mut Scratch, out: &mut Vec<UnitOverlap>) {
        if sc.owner != self.sh.instance {
            sc.owner = self.sh.instance;
            sc.unit.fill(UNREAD);
        }
        self.walk(keys, sc);
        let Scratch {
            unit, out: found, ..
        } = sc;
        out.extend(found.iter().map(|&(d, depth)| {
            let id = &mut unit[d as usize];
            if *id == UNREAD {
                *id = self.sh.units.get(d).load(Ordering::Relaxed);
            }
            UnitOverlap {
                unit: Unit::from_id(*id),
                confirmed: depth,
                predicted: 0,
                inflight: 0,
            }
        }));
    }

    /// `(dense unit, depth)` into `sc.out`.
    fn walk(&self, keys: &[u64], sc: &mut Scratch) {
        sc.out.clear();
        let Some(&first) = keys.first() else {
            return;
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
                return;
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
            let avail = (r.len as usize).min(keys.len() - i);
            let m = sh.chunks.key_prefix(r.start, avail, &keys[i..]) as u32;
            if m == 0 {
                break;
            }
            for &(u, cut) in &r.holders {
                let u = u as usize;
                if u >= sc.seen.len() {
                    sc.seen.resize(u + 1, 0);
                    sc.slot.resize(u + 1, 0);
                    sc.unit.resize(u + 1, UNREAD);
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
            if m < r.len || i == keys.len() {
                break;
            }
            let Some(c) = r.child(keys[i]) else {
                break;
            };
            let next = sh.runs.get(c).read();
            guard = next;
        }
    }
}
