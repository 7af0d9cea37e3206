//! Per-(worker, rank) load the KV policy itself books: requests in flight and the sum of their
//! request blocks, in total and per prompt (keyed by the prompt's last sequence hash), so a
//! request can tell its siblings' load (identical prompt: one shared prefill, shared KV) from
//! other requests' load. Released by [`LoadGuard`] on drop.
//!
//! The engine's own load reports (SGLang's load publisher, `events::load_source`) are kept
//! beside the bookings: a unit's view is the larger of what the router booked and what the
//! engine reported (running + waiting requests; KV tokens in use plus queued tokens, in
//! blocks), so load the router did not route (other routers, direct clients) is seen. A
//! report older than [`REPORT_STALE_AFTER`] is ignored (the publisher sends at least once a
//! second), so a silent publisher falls back to the bookings alone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::unit_map::UnitMap;
use crossbeam_queue::ArrayQueue;
use tokio::time::Instant;

use crate::workers::{Rank, WorkerId};

/// Counters of one unit (or of one prompt on one unit).
#[derive(Debug, Default)]
pub struct UnitLoad {
    pub requests: AtomicU64,
    pub blocks: AtomicU64,
}

impl UnitLoad {
    fn add(&self, blocks: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.blocks.fetch_add(blocks, Ordering::Relaxed);
    }
    fn sub(&self, blocks: u64) {
        self.requests.fetch_sub(1, Ordering::Relaxed);
        self.blocks.fetch_sub(blocks, Ordering::Relaxed);
    }
    fn read(&self) -> (u64, u64) {
        (
            self.requests.load(Ordering::Relaxed),
            self.blocks.load(Ordering::Relaxed),
        )
    }
}

/// What a request sees of a unit's load.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadView {
    /// All requests in flight on the unit.
    pub requests: u64,
    /// Request blocks of the requests in flight whose prompt differs from this one.
    pub other_blocks: u64,
    /// Requests in flight with this prompt (siblings; their KV is locked on the unit).
    pub siblings: u64,
}

type PromptKey = (WorkerId, Rank, u64);

/// Engine reports older than this are ignored (SGLang re-sends an unchanged report once a
/// second, `LOAD_PUBLISH_HEARTBEAT_S`, so three missed heartbeats mean the feed is gone).
pub const REPORT_STALE_AFTER: Duration = Duration::from_secs(3);

/// One unit's load as its engine last reported it.
#[derive(Debug, Clone, Copy)]
struct Reported {
    requests: u64,
    blocks: u64,
    at: Instant,
}

/// All units' counters.
#[derive(Debug)]
pub struct UnitLoads {
    units: UnitMap<(WorkerId, Rank), Arc<UnitLoad>>,
    prompts: Arc<UnitMap<PromptKey, Arc<UnitLoad>>>,
    reported: UnitMap<(WorkerId, Rank), Reported>,
    /// Units whose report arrived since the decisions last took them (to refile them on the
    /// board; lock-free); at most [`MAX_FRESH_REPORTS`], the sweep catches the rest.
    fresh: ArrayQueue<(WorkerId, Rank)>,
}

impl Default for UnitLoads {
    fn default() -> Self {
        UnitLoads {
            units: UnitMap::default(),
            prompts: Arc::default(),
            reported: UnitMap::default(),
            fresh: ArrayQueue::new(MAX_FRESH_REPORTS),
        }
    }
}

/// Bound of the reported units waiting to be refiled.
const MAX_FRESH_REPORTS: usize = 4096;

impl UnitLoads {
    /// The unit's load as seen by a request whose prompt key is `prompt` (None: no tokens):
    /// the router's bookings, raised to the engine's fresh report where that is larger.
    pub fn view(&self, worker: WorkerId, rank: Rank, prompt: Option<u64>) -> LoadView {
        self.view_at(worker, rank, prompt, Instant::now())
    }

    fn view_at(&self, worker: WorkerId, rank: Rank, prompt: Option<u64>, now: Instant) -> LoadView {
        let (requests, blocks) = self.units.get(&(worker, rank)).map_or((0, 0), |u| u.read());
        let (siblings, same) = prompt
            .and_then(|p| self.prompts.get(&(worker, rank, p)).map(|u| u.read()))
            .unwrap_or((0, 0));
        let mut view = LoadView {
            requests,
            other_blocks: blocks.saturating_sub(same),
            siblings,
        };
        if let Some(r) = self.reported.get(&(worker, rank)).map(|r| *r) {
            if now.saturating_duration_since(r.at) <= REPORT_STALE_AFTER {
                // The report counts this prompt's siblings too (they are the engine's requests).
                view.requests = view.requests.max(r.requests);
                view.other_blocks = view.other_blocks.max(r.blocks.saturating_sub(same));
            }
        }
        view
    }

    /// Records the engine's report for a unit: `requests` running or waiting, `blocks` of
    /// KV in use or queued.
    pub fn report(&self, worker: WorkerId, rank: Rank, requests: u64, blocks: u64) {
        self.report_at(worker, rank, requests, blocks, Instant::now());
    }

    fn report_at(&self, worker: WorkerId, rank: Rank, requests: u64, blocks: u64, at: Instant) {
        // Full: dropped, the sweep refiles it.
        let _ = self.fresh.push((worker, rank));
        self.reported.insert(
            (worker, rank),
            Reported {
                requests,
                blocks,
                at,
            },
        );
    }

    /// Up to `max` units reported since the last call, oldest first.
    pub fn take_reported(&self, max: usize) -> impl Iterator<Item = (WorkerId, Rank)> + '_ {
        (0..max).map_while(|_| self.fresh.pop())
    }

    /// Forgets a worker's engine reports (its load feed stopped: removal or restart).
    pub fn forget_reports(&self, worker: WorkerId) {
        self.reported.retain(|(w, _), _| *w != worker);
    }

    /// Counts one request of `blocks` blocks (prompt key `prompt`) until the guard drops.
    pub fn begin(
        &self,
        worker: WorkerId,
        rank: Rank,
        prompt: Option<u64>,
        blocks: u32,
    ) -> LoadGuard {
        let blocks = u64::from(blocks);
        let cell = self.units.entry((worker, rank)).or_default().clone();
        cell.add(blocks);
        let prompt = prompt.map(|p| {
            let key = (worker, rank, p);
            self.prompts.entry(key).or_default().add(blocks);
            key
        });
        LoadGuard {
            cell,
            prompts: self.prompts.clone(),
            prompt,
            blocks,
        }
    }

    /// Forgets a removed worker's counters (outstanding guards keep their own cell).
    pub fn remove_worker(&self, worker: WorkerId) {
        self.units.retain(|(w, _), _| *w != worker);
        self.prompts.retain(|(w, _, _), _| *w != worker);
        self.forget_reports(worker);
    }
}

/// One request's share of a unit's load.
#[derive(Debug)]
pub struct LoadGuard {
    cell: Arc<UnitLoad>,
    prompts: Arc<UnitMap<PromptKey, Arc<UnitLoad>>>,
    prompt: Option<PromptKey>,
    blocks: u64,
}

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.cell.sub(self.blocks);
        if let Some(key) = self.prompt {
            if let Some(e) = self.prompts.get(&key) {
                e.sub(self.blocks);
            }
            self.prompts
                .remove_if(&key, |_, e| e.requests.load(Ordering::Relaxed) == 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_count_and_release_and_siblings_are_told_apart() {
        let loads = UnitLoads::default();
        let w = WorkerId(1);
        let a = loads.begin(w, 0, Some(7), 10);
        let b = loads.begin(w, 0, Some(7), 10);
        let c = loads.begin(w, 0, Some(8), 5);
        let _d = loads.begin(w, 1, None, 7);
        let v = loads.view(w, 0, Some(7));
        assert_eq!((v.requests, v.other_blocks), (3, 5));
        assert_eq!(loads.view(w, 0, Some(8)).other_blocks, 20);
        assert_eq!(loads.view(w, 0, None).other_blocks, 25);
        drop(a);
        drop(b);
        assert_eq!(
            loads.view(w, 0, Some(7)),
            LoadView {
                requests: 1,
                other_blocks: 5,
                siblings: 0,
            }
        );
        drop(c);
        assert_eq!(loads.view(w, 0, Some(8)), LoadView::default());
        assert!(loads.prompts.get(&(w, 0, 7)).is_none());
        assert_eq!(loads.view(w, 1, None).requests, 1);
        assert_eq!(loads.view(WorkerId(9), 0, None), LoadView::default());
    }

    #[tokio::test(start_paused = true)]
    async fn an_engine_report_counts_until_it_is_stale_on_the_runtime_clock() {
        let loads = UnitLoads::default();
        let w = WorkerId(1);
        loads.report(w, 0, 9, 40);
        tokio::time::advance(REPORT_STALE_AFTER).await;
        assert_eq!(loads.view(w, 0, None).requests, 9, "fresh until the limit");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(loads.view(w, 0, None).requests, 0, "stale after it");
    }

    #[test]
    fn engine_reports_raise_the_view_until_stale() {
        let loads = UnitLoads::default();
        let w = WorkerId(1);
        let _booked = loads.begin(w, 0, Some(7), 4);
        let t0 = Instant::now();
        loads.report_at(w, 0, 9, 40, t0);
        let v = loads.view_at(w, 0, Some(8), t0);
        assert_eq!(
            (v.requests, v.other_blocks),
            (9, 40),
            "the engine sees more"
        );
        let v = loads.view_at(w, 0, Some(7), t0);
        assert_eq!(
            (v.requests, v.other_blocks, v.siblings),
            (9, 36, 1),
            "siblings' blocks excluded"
        );
        loads.report_at(w, 0, 0, 0, t0);
        assert_eq!(
            loads.view_at(w, 0, None, t0).requests,
            1,
            "bookings are the floor"
        );
        loads.report_at(w, 0, 9, 40, t0);
        let late = t0 + REPORT_STALE_AFTER + Duration::from_millis(1);
        assert_eq!(
            loads.view_at(w, 0, None, late).requests,
            1,
            "stale report ignored"
        );
        assert_eq!(
            loads.view_at(w, 1, None, t0),
            LoadView::default(),
            "other rank"
        );
        loads.forget_reports(w);
        assert_eq!(
            loads.view_at(w, 0, None, t0).other_blocks,
            4,
            "report forgotten"
        );
    }
}
