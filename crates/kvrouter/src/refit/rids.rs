//! `RidTable`: which worker holds each in-flight request id, so `/abort_request {"rid"}`
//! reaches only that worker. Entries live exactly as long as the request's response.

use std::sync::Arc;

use dashmap::DashMap;

use crate::workers::Worker;

/// rid -> worker of in-flight requests. Cheap to clone.
#[derive(Clone, Default)]
pub struct RidTable {
    map: Arc<DashMap<String, Arc<Worker>>>,
}

/// Removes its rids from the table when dropped (keep it alive with the response body).
pub struct RidGuard {
    map: Arc<DashMap<String, Arc<Worker>>>,
    rids: Vec<String>,
    worker: crate::workers::WorkerId,
}

impl Drop for RidGuard {
    fn drop(&mut self) {
        for rid in self.rids.drain(..) {
            self.map.remove_if(&rid, |_, w| w.id == self.worker);
        }
    }
}

impl RidTable {
    /// Records that `rids` are in flight on `worker` until the guard drops.
    pub fn track(&self, rids: &[String], worker: &Arc<Worker>) -> Option<RidGuard> {
        if rids.is_empty() {
            return None;
        }
        for rid in rids {
            self.map.insert(rid.clone(), worker.clone());
        }
        Some(RidGuard {
            map: self.map.clone(),
            rids: rids.to_vec(),
            worker: worker.id,
        })
    }

    /// The worker holding `rid` (exact match, else the request whose batch rid it prefixes,
    /// like SGLang's `rid_i` items of a batch).
    pub fn worker_of(&self, rid: &str) -> Option<Arc<Worker>> {
        if let Some(w) = self.map.get(rid) {
            return Some(w.clone());
        }
        self.map
            .iter()
            .find(|e| e.key().starts_with(rid))
            .map(|e| e.value().clone())
    }

    /// Number of tracked rids.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::{WorkerId, WorkerInfo};

    #[test]
    fn tracked_while_guard_lives() {
        let t = RidTable::default();
        let w = Arc::new(Worker::new(
            WorkerId(1),
            "http://a:1",
            WorkerInfo::default(),
        ));
        assert!(t.track(&[], &w).is_none());
        let g = t.track(&["r1".into(), "r2_0".into()], &w).expect("guard");
        assert_eq!(t.worker_of("r1").map(|w| w.id), Some(WorkerId(1)));
        assert_eq!(t.worker_of("r2").map(|w| w.id), Some(WorkerId(1)));
        assert!(t.worker_of("zz").is_none());
        drop(g);
        assert!(t.is_empty());
    }
}
