//! `UnitBoard`: the units ordered by their wait (the cost model's `wait` without any overlap:
//! queued prefill and the decode load ahead, at the unit's speed), kept incrementally so a
//! decision reads the least-waiting few without visiting the fleet.
//!
//! A unit's key is filed again whenever the router learns its load changed: when it is booked
//! or released, whenever a decision reads it, and by a sweep of a few units per decision
//! (which catches load the router did not cause: engine reports, expired predictions). A stale
//! key costs nothing wrong: the decision re-reads every unit it takes from the board, so a key
//! that is too low makes the unit a candidate that then loses, and a key that is too high keeps
//! it out until its next refile.
//!
//! Sharded by unit so bookings on different units never share a lock; each shard is a sorted
//! set, so the least-waiting of a shard is its first entry.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};

use kvrouter_index::Unit;
use parking_lot::Mutex;

use super::unit_map::UnitHasher;

/// Shards of the board.
pub(super) const SHARDS: usize = 8;

/// A non-negative wait as a totally ordered integer (IEEE order of non-negative floats).
type Key = u64;

fn key(wait: f64) -> Key {
    if wait.is_finite() && wait > 0.0 {
        wait.to_bits()
    } else {
        0
    }
}

#[derive(Default)]
struct Shard {
    order: BTreeSet<(Key, Unit)>,
    keys: HashMap<Unit, Key, UnitHasher>,
}

/// The units by wait (see module docs).
pub struct UnitBoard {
    shards: Box<[Mutex<Shard>]>,
    filed: AtomicUsize,
}

impl Default for UnitBoard {
    fn default() -> Self {
        UnitBoard {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            filed: AtomicUsize::new(0),
        }
    }
}

impl UnitBoard {
    /// The shard `unit` is filed in.
    pub fn shard_of(unit: Unit) -> usize {
        let h = (unit.worker.0 as usize).wrapping_mul(31) ^ unit.rank as usize;
        h % SHARDS
    }

    fn shard(&self, unit: Unit) -> &Mutex<Shard> {
        &self.shards[Self::shard_of(unit)]
    }

    /// Files `unit` at `wait` (replacing its previous key).
    pub fn file(&self, unit: Unit, wait: f64) {
        let k = key(wait);
        let mut s = self.shard(unit).lock();
        match s.keys.insert(unit, k) {
            Some(old) if old == k => {}
            Some(old) => {
                s.order.remove(&(old, unit));
                s.order.insert((k, unit));
            }
            None => {
                s.order.insert((k, unit));
                self.filed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Appends to `out` the `per_shard` least-waiting units of every shard that `accept`s
    /// (units the request may use; a unit's shard is [`UnitBoard::shard_of`]), looking at most
    /// `4 * per_shard` entries per shard. The
    /// entries it rejects leave the board (removed or unroutable workers; the sweep files
    /// them again once they are candidates).
    pub fn least(&self, per_shard: usize, accept: impl Fn(Unit) -> bool, out: &mut Vec<Unit>) {
        let mut rejected: Vec<(Key, Unit)> = Vec::new();
        for shard in self.shards.iter() {
            let mut s = shard.lock();
            let mut taken = 0;
            for &(k, u) in s.order.iter().take(4 * per_shard) {
                if taken == per_shard {
                    break;
                }
                if accept(u) {
                    out.push(u);
                    taken += 1;
                } else {
                    rejected.push((k, u));
                }
            }
            self.filed.fetch_sub(rejected.len(), Ordering::Relaxed);
            for entry in rejected.drain(..) {
                s.order.remove(&entry);
                s.keys.remove(&entry.1);
            }
        }
    }

    /// Units filed.
    pub fn len(&self) -> usize {
        self.filed.load(Ordering::Relaxed)
    }

    /// No unit filed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::WorkerId;

    fn unit(w: u32) -> Unit {
        Unit::new(WorkerId(w), 0)
    }

    #[test]
    fn least_reads_the_lowest_keys_and_refiling_moves_a_unit() {
        let b = UnitBoard::default();
        for w in 0..64 {
            b.file(unit(w), f64::from(w));
        }
        assert_eq!(b.len(), 64);
        let mut out = Vec::new();
        b.least(1, |_| true, &mut out);
        assert_eq!(out.len(), SHARDS);
        assert!(
            out.contains(&unit(0)),
            "the global least is its shard's first"
        );
        b.file(unit(0), 1000.0);
        b.file(unit(63), 0.0);
        out.clear();
        b.least(1, |_| true, &mut out);
        assert!(out.contains(&unit(63)) && !out.contains(&unit(0)));
        assert_eq!(b.len(), 64, "refiling replaces");
    }

    #[test]
    fn rejected_units_are_skipped_and_leave_the_board() {
        let b = UnitBoard::default();
        for w in 0..16 {
            b.file(unit(w), f64::from(w));
        }
        let mut out = Vec::new();
        b.least(2, |u| u.worker.0 != 3, &mut out);
        assert!(!out.is_empty() && !out.contains(&unit(3)));
        assert_eq!(b.len(), 15, "the rejected unit left");
        out.clear();
        b.least(16, |_| true, &mut out);
        assert_eq!(out.len(), 15);
        assert!(!out.contains(&unit(3)));
        b.file(unit(99), f64::NAN);
        b.file(unit(98), -1.0);
        out.clear();
        b.least(1, |u| u.worker.0 >= 98, &mut out);
        assert_eq!(out.len(), 2, "bad waits file as 0");
    }
}
