//! `RidTable`: which workers hold each in-flight request id, so `/abort_request {"rid"}`
//! reaches only that worker, and so a client's disconnect abort never names another client's
//! request. Entries live exactly as long as the request's response.
//!
//! SGLang aborts by prefix: `Scheduler.abort_request` aborts every queued or running request
//! whose `req.rid.startswith(recv_req.rid)` (sglang 0.5.23,
//! `python/sglang/srt/managers/scheduler.py:5675-5800`), and `TokenizerManager.abort_request`
//! forwards the rid as is (`tokenizer_manager.py:2241`). So an abort for a client's rid `v`
//! would also end another client's `victim-1` on the same worker. [`RidGuard::abortable`]
//! names a rid only when no other in-flight request the router sent to that worker has a rid it
//! is a prefix of (`kvrouter_abort_skipped_total{reason}` otherwise: the request runs on).
//!
//! Clients choose the rids, so tracking is bounded: a request with a rid longer than
//! [`MAX_RID_BYTES`], more than [`MAX_RIDS_PER_REQUEST`] rids, or that would take the table past
//! [`MAX_TRACKED_RID_BYTES`] is not tracked (`kvrouter_rids_untracked_total`); it is counted as
//! opaque on its worker, and no disconnect abort is sent to a worker while it holds one (its
//! rids cannot be checked).

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::metrics::bounds::BoundsMetrics;
use crate::workers::{Worker, WorkerId};

/// Longest rid tracked, in bytes (SGLang's own rids are 32 hex characters).
pub(crate) const MAX_RID_BYTES: usize = 256;
/// Most rids tracked for one request (a batch).
pub(crate) const MAX_RIDS_PER_REQUEST: usize = 4096;
/// Bytes of rids the table holds at most (each rid charged its length + [`RID_OVERHEAD`]).
pub(crate) const MAX_TRACKED_RID_BYTES: usize = 64 << 20;
/// Bytes charged per tracked rid beyond its text (tree node, holder, allocation).
const RID_OVERHEAD: usize = 96;

struct Holder {
    worker: Arc<Worker>,
    token: u64,
    /// The worker `/abort_request {"rid"}` goes to (a PD request's decode worker).
    primary: bool,
}

#[derive(Default)]
struct Inner {
    by_rid: BTreeMap<Box<str>, Vec<Holder>>,
    bytes: usize,
    /// Requests in flight per worker whose rids are not tracked.
    opaque: HashMap<WorkerId, usize>,
}

/// rid -> workers of in-flight requests. Cheap to clone.
#[derive(Clone, Default)]
pub struct RidTable {
    inner: Arc<Mutex<Inner>>,
    next_token: Arc<AtomicU64>,
}

/// One request's rids on its workers; removes them from the table when the last clone drops
/// (keep it alive with the response body).
#[derive(Clone)]
pub struct RidGuard(Arc<GuardInner>);

struct GuardInner {
    inner: Arc<Mutex<Inner>>,
    rids: Vec<String>,
    workers: Vec<Arc<Worker>>,
    token: u64,
    tracked: bool,
}

impl Drop for GuardInner {
    fn drop(&mut self) {
        let mut inner = self.inner.lock();
        if !self.tracked {
            for w in &self.workers {
                if let Some(n) = inner.opaque.get_mut(&w.id) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        inner.opaque.remove(&w.id);
                    }
                }
            }
            return;
        }
        for rid in &self.rids {
            let Some(holders) = inner.by_rid.get_mut(rid.as_str()) else {
                continue;
            };
            let before = holders.len();
            holders.retain(|h| h.token != self.token);
            let removed = before - holders.len();
            let empty = holders.is_empty();
            if empty {
                inner.by_rid.remove(rid.as_str());
            }
            inner.bytes = inner
                .bytes
                .saturating_sub(removed * (rid.len() + RID_OVERHEAD));
        }
    }
}

impl RidTable {
    /// Records that `rids` are in flight on `worker` until the guard drops.
    pub fn track(&self, rids: &[String], worker: &Arc<Worker>) -> Option<RidGuard> {
        self.track_on(rids, std::slice::from_ref(worker))
    }

    /// Records `rids` on `workers` (the first one primary: where `/abort_request` goes; the
    /// others, e.g. a PD request's prefill worker, only for abort isolation).
    pub fn track_on(&self, rids: &[String], workers: &[Arc<Worker>]) -> Option<RidGuard> {
        if rids.is_empty() || workers.is_empty() {
            return None;
        }
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let cost: usize =
            rids.iter().map(|r| r.len() + RID_OVERHEAD).sum::<usize>() * workers.len();
        let mut inner = self.inner.lock();
        let tracked = rids.len() <= MAX_RIDS_PER_REQUEST
            && rids.iter().all(|r| r.len() <= MAX_RID_BYTES)
            && inner.bytes + cost <= MAX_TRACKED_RID_BYTES;
        if tracked {
            for rid in rids {
                let holders = inner.by_rid.entry(rid.as_str().into()).or_default();
                for (i, w) in workers.iter().enumerate() {
                    holders.push(Holder {
                        worker: w.clone(),
                        token,
                        primary: i == 0,
                    });
                }
            }
            inner.bytes += cost;
        } else {
            for w in workers {
                *inner.opaque.entry(w.id).or_default() += 1;
            }
            BoundsMetrics::get().rids_untracked.inc();
        }
        drop(inner);
        Some(RidGuard(Arc::new(GuardInner {
            inner: self.inner.clone(),
            rids: if tracked { rids.to_vec() } else { Vec::new() },
            workers: workers.to_vec(),
            token,
            tracked,
        })))
    }

    /// The worker holding `rid` (exact match, else the request whose batch rid it prefixes,
    /// like SGLang's `rid_i` items of a batch).
    pub fn worker_of(&self, rid: &str) -> Option<Arc<Worker>> {
        let inner = self.inner.lock();
        let primary = |hs: &Vec<Holder>| hs.iter().find(|h| h.primary).map(|h| h.worker.clone());
        if let Some(w) = inner.by_rid.get(rid).and_then(primary) {
            return Some(w);
        }
        inner
            .by_rid
            .range::<str, _>((Bound::Included(rid), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(rid))
            .find_map(|(_, hs)| primary(hs))
    }

    /// Number of distinct tracked rids.
    pub fn len(&self) -> usize {
        self.inner.lock().by_rid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.lock().by_rid.is_empty()
    }
}

impl RidGuard {
    /// The request's rids that may be aborted on `worker` without touching another request:
    /// none if they were not tracked or the worker holds untracked rids; never an empty rid
    /// (SGLang before 0.5.23 aborted everything on it); otherwise each rid that is not a
    /// prefix of a rid another in-flight request holds on `worker`. Skips are counted.
    pub fn abortable(&self, worker: &Worker) -> Abort {
        let g = &self.0;
        let skipped = |reason: &str, n: usize| {
            if n > 0 {
                BoundsMetrics::get()
                    .abort_skipped
                    .with_label_values(&[reason])
                    .inc_by(n as u64);
                tracing::debug!(worker = %worker.url, reason, rids = n, "disconnect abort not sent");
            }
        };
        if !g.tracked {
            skipped("untracked", 1);
            return Abort {
                rids: Vec::new(),
                withheld: true,
            };
        }
        let inner = g.inner.lock();
        if inner.opaque.get(&worker.id).is_some_and(|n| *n > 0) {
            skipped("untracked_rids_on_worker", g.rids.len());
            return Abort {
                rids: Vec::new(),
                withheld: true,
            };
        }
        let mut out: Vec<String> = Vec::with_capacity(g.rids.len());
        let (mut empty, mut shadowing) = (0, 0);
        for rid in &g.rids {
            if rid.is_empty() {
                empty += 1;
                continue;
            }
            if out.contains(rid) {
                continue;
            }
            let other = inner
                .by_rid
                .range::<str, _>((Bound::Included(rid.as_str()), Bound::Unbounded))
                .take_while(|(k, _)| k.starts_with(rid.as_str()))
                .any(|(_, hs)| {
                    hs.iter()
                        .any(|h| h.worker.id == worker.id && h.token != g.token)
                });
            if other {
                shadowing += 1;
            } else {
                out.push(rid.clone());
            }
        }
        drop(inner);
        skipped("empty_rid", empty);
        skipped("prefix_of_other_rid", shadowing);
        Abort {
            rids: out,
            withheld: empty + shadowing > 0,
        }
    }
}

/// What [`RidGuard::abortable`] allows.
pub struct Abort {
    /// Rids to name in `/abort_request`.
    pub rids: Vec<String>,
    /// Some rid was not named: the request should rather run to its end.
    pub withheld: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::WorkerInfo;

    fn worker(id: u32) -> Arc<Worker> {
        Arc::new(Worker::new(
            WorkerId(id),
            &format!("http://a:{id}"),
            WorkerInfo::default(),
        ))
    }

    #[test]
    fn tracked_while_guard_lives() {
        let t = RidTable::default();
        let w = worker(1);
        assert!(t.track(&[], &w).is_none());
        let g = t.track(&["r1".into(), "r2_0".into()], &w).expect("guard");
        assert_eq!(t.worker_of("r1").map(|w| w.id), Some(WorkerId(1)));
        assert_eq!(t.worker_of("r2").map(|w| w.id), Some(WorkerId(1)));
        assert!(t.worker_of("zz").is_none());
        let g2 = g.clone();
        drop(g);
        assert_eq!(t.len(), 2, "a clone keeps the rids");
        drop(g2);
        assert!(t.is_empty());
    }

    #[test]
    fn an_abort_never_names_a_prefix_of_another_requests_rid_on_that_worker() {
        let t = RidTable::default();
        let (w1, w2) = (worker(1), worker(2));
        let victim = t.track(&["victim-1".into()], &w1).expect("guard");
        let attacker = t.track(&["v".into(), "own".into()], &w1).expect("guard");
        assert_eq!(attacker.abortable(&w1).rids, vec!["own".to_string()]);
        // Another worker's scheduler never sees the victim.
        let elsewhere = t.track(&["v".into()], &w2).expect("guard");
        assert_eq!(elsewhere.abortable(&w2).rids, vec!["v".to_string()]);
        // The victim's own abort is fine (nothing else starts with it), and its own batch rids
        // never block it.
        let batch = t
            .track(&["b".into(), "b_1".into(), String::new()], &w1)
            .expect("guard");
        assert_eq!(
            batch.abortable(&w1).rids,
            vec!["b".to_string(), "b_1".to_string()]
        );
        assert_eq!(victim.abortable(&w1).rids, vec!["victim-1".to_string()]);
        drop(victim);
        assert_eq!(
            attacker.abortable(&w1).rids,
            vec!["v".to_string(), "own".to_string()]
        );
    }

    #[test]
    fn oversized_rids_are_not_tracked_and_block_aborts_on_their_worker() {
        let t = RidTable::default();
        let w = worker(1);
        let normal = t.track(&["a".into()], &w).expect("guard");
        let long = t
            .track(&["x".repeat(MAX_RID_BYTES + 1)], &w)
            .expect("guard");
        let many: Vec<String> = (0..=MAX_RIDS_PER_REQUEST).map(|i| i.to_string()).collect();
        let batch = t.track(&many, &w).expect("guard");
        assert_eq!(t.len(), 1, "only the normal rid is held");
        assert!(long.abortable(&w).rids.is_empty());
        assert!(
            normal.abortable(&w).rids.is_empty(),
            "an untracked rid could start with `a`"
        );
        drop((long, batch));
        assert_eq!(normal.abortable(&w).rids, vec!["a".to_string()]);
    }

    #[test]
    fn the_table_stops_tracking_at_its_byte_budget() {
        let t = RidTable::default();
        let w = worker(1);
        let per = MAX_RID_BYTES + RID_OVERHEAD;
        let batch: Vec<String> = (0..MAX_RIDS_PER_REQUEST)
            .map(|i| format!("{i:0>256}"))
            .collect();
        let mut guards = Vec::new();
        for _ in 0..(MAX_TRACKED_RID_BYTES / (per * MAX_RIDS_PER_REQUEST) + 2) {
            guards.push(t.track(&batch, &w).expect("guard"));
        }
        assert!(t.inner.lock().bytes <= MAX_TRACKED_RID_BYTES);
        assert!(!t.inner.lock().opaque.is_empty());
        drop(guards);
        assert!(t.is_empty());
        assert_eq!(t.inner.lock().bytes, 0);
        assert!(t.inner.lock().opaque.is_empty());
    }
}
