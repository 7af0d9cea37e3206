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
use super::{Residency, Shared};
use crate::index::overlap::UnitOverlap;
use crate::index::unit::Unit;

/// A thread's reusable find state: per dense unit, the epoch it was last seen in, its entry
/// in the answer and its unit id (read once from the shared arena: a dense index names one
/// unit for the residency's life, so the copy never goes stale while `owner` is the same).
#[derive(Default)]
struct Scratch {
    seen: Vec<u32>,
    slot: Vec<u32>,
    unit: Vec<u32>,
    /// The residency (`Shared::instance`) whose unit ids `unit` holds.
    owner: u64,
    epoch: u32,
}

/// `unit` entry not read yet.
const UNREAD: u32 = u32::MAX;

impl Scratch {
    /// Ready for a find in the residency `sh`: a new epoch, the unit ids of another
    /// residency forgotten.
    fn start(&mut self, sh: &Shared) {
        if self.owner != sh.instance {
            self.owner = sh.instance;
            self.unit.fill(UNREAD);
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.seen.fill(0);
            self.epoch = 1;
        }
    }

    /// Dense unit `d` first seen in this find, its answer at `slot`: returns its unit id.
    #[inline]
    fn first_seen(&mut self, d: usize, slot: usize, sh: &Shared) -> u32 {
        if d >= self.seen.len() {
            self.seen.resize(d + 1, 0);
            self.slot.resize(d + 1, 0);
            self.unit.resize(d + 1, UNREAD);
        }
        self.seen[d] = self.epoch;
        self.slot[d] = slot as u32;
        let id = &mut self.unit[d];
        if *id == UNREAD {
            *id = sh.units.get(d as u32).load(Ordering::Relaxed);
        }
        *id
    }

    /// The answer slot of dense unit `d`, if this find has seen it.
    #[inline]
    fn slot_of(&self, d: usize) -> Option<usize> {
        (self.seen.get(d) == Some(&self.epoch)).then(|| self.slot[d] as usize)
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

impl Residency {
    /// Appends a [`UnitOverlap`] (confirmed depth only) for every unit holding at least the
    /// first block of `keys`, in no particular order.
    pub(crate) fn find(&self, keys: &[u64], out: &mut Vec<UnitOverlap>) {
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut sc) => self.walk(keys, &mut sc, out),
            Err(_) => self.walk(keys, &mut Scratch::default(), out),
        });
    }

    /// The walk: the first run's holders are the answer's units (a run lists a unit once),
    /// written with their depth there; a later run raises the depth of those it lists that
    /// held everything before it.
    fn walk(&self, keys: &[u64], sc: &mut Scratch, out: &mut Vec<UnitOverlap>) {
        let Some(&first) = keys.first() else {
            return;
        };
        let sh = &self.sh;
        let mut guard: RwLockReadGuard<'_, Run> = {
            let Some(id) = sh.root.get(&first) else {
                return;
            };
            sh.runs.get(*id).read()
        };
        sc.start(sh);
        let base = out.len();
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
            if depth == 0 {
                out.reserve(r.holders.len());
                for &(u, cut) in &r.holders {
                    let id = sc.first_seen(u as usize, out.len() - base, sh);
                    out.push(UnitOverlap {
                        unit: Unit::from_id(id),
                        confirmed: cut.min(m),
                        predicted: 0,
                        inflight: 0,
                    });
                }
            } else {
                for &(u, cut) in &r.holders {
                    if let Some(slot) = sc.slot_of(u as usize) {
                        let entry = &mut out[base + slot];
                        if entry.confirmed == depth {
                            entry.confirmed = depth + cut.min(m);
                        }
                    }
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
