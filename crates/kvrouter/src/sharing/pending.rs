//! `Pending`: other replicas' bookings applied here whose follow-up (prefill done, cancel)
//! may still come, keyed by (instance, n). Bounded: entries leave at their TTL, on their
//! follow-up, or oldest-first when the map is full.

use std::collections::{HashMap, VecDeque};

use kvrouter_index::PredictionId;
use tokio::time::Instant;

/// (hash of the publishing instance, its booking number).
pub(crate) type Key = (u64, u64);

/// The bounded map (see module docs).
pub(crate) struct Pending {
    cap: usize,
    map: HashMap<Key, (PredictionId, Instant)>,
    /// Insertion order with deadlines; may hold keys already removed from `map`.
    order: VecDeque<(Instant, Key)>,
}

impl Pending {
    pub(crate) fn new(cap: usize) -> Pending {
        Pending {
            cap: cap.max(1),
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Adds a booking until `deadline`; returns how many live entries were evicted to make room.
    pub(crate) fn insert(
        &mut self,
        key: Key,
        id: PredictionId,
        deadline: Instant,
        now: Instant,
    ) -> u64 {
        self.expire(now);
        let mut evicted = 0;
        while self.map.len() >= self.cap || self.order.len() >= 2 * self.cap {
            let Some((_, k)) = self.order.pop_front() else {
                break;
            };
            if self.map.remove(&k).is_some() {
                evicted += 1;
            }
        }
        self.map.insert(key, (id, deadline));
        self.order.push_back((deadline, key));
        evicted
    }

    /// Takes the booking `key` out (its follow-up arrived).
    pub(crate) fn take(&mut self, key: Key) -> Option<PredictionId> {
        self.map.remove(&key).map(|(id, _)| id)
    }

    /// Drops entries whose deadline passed (front of the queue first; TTLs are usually equal).
    pub(crate) fn expire(&mut self, now: Instant) {
        while let Some(&(deadline, key)) = self.order.front() {
            if deadline > now {
                break;
            }
            self.order.pop_front();
            if self.map.get(&key).is_some_and(|(_, d)| *d <= now) {
                self.map.remove(&key);
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn entries_leave_on_follow_up_ttl_or_overflow() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut p = Pending::new(2);
        assert_eq!(p.insert((1, 1), PredictionId(10), t0 + s, t0), 0);
        assert_eq!(p.insert((1, 2), PredictionId(11), t0 + 2 * s, t0), 0);
        assert_eq!(p.take((1, 1)), Some(PredictionId(10)));
        assert_eq!(p.take((1, 1)), None);
        // Room again: no eviction. Full: the oldest live one goes.
        assert_eq!(p.insert((1, 3), PredictionId(12), t0 + 3 * s, t0), 0);
        assert_eq!(p.insert((1, 4), PredictionId(13), t0 + 3 * s, t0), 1);
        assert_eq!(p.take((1, 2)), None);
        assert_eq!(p.len(), 2);
        // TTL passed: gone.
        p.expire(t0 + 3 * s);
        assert!(p.is_empty());
    }
}
