//! Stage 1 of a KV decision: read the rows of the units that can win, without side effects.
//!
//! A row is what the cost model needs of one unit: the request's overlap there, its load, its
//! queued prefill, its learned speed and its KV pressure. Small fleets read every unit. Past
//! [`FULL_SCAN_WORKERS`] workers the decision reads only the units that can win, so its cost
//! does not grow with the fleet:
//! - the least-waiting units of the [`UnitBoard`] (a cold unit wins only by its wait),
//! - the units with an overlap deeper than the board's picks of their shard have (the index
//!   returns them; at most [`MAX_OVERLAP_ROWS`], the deepest): a unit no deeper than a pick of
//!   its shard waits longer for no more overlap, so a prefix every unit holds (a shared system
//!   prompt) adds no rows,
//! - the sticky key's worker, and the units holding the prompt in a lower cache tier.
//!
//! A unit outside that set has no overlap and waits at least as long as the board's picks, so
//! at equal speed it cannot beat them; `differential.rs` (a unit test) measures how often
//! and by how much the two differ on random fleets. The rules that need every unit (the blind
//! rule's rendezvous hash) read every unit.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use kvrouter_index::{KvIndex, Overlaps, Unit, UnitOverlap};
use tokio::time::Instant;

use super::board::{UnitBoard, SHARDS};
use super::cost::{wait, CostWeights, UnitInputs};
use super::load::{LoadView, UnitLoads};
use super::pressure::{Turnover, UnitPressure};
use super::rates::{Speed, UnitRates};
use crate::workers::{Rank, Worker, WorkerId};

/// Fleets up to this many workers are read whole.
pub const FULL_SCAN_WORKERS: usize = 32;
/// At most this many units with an overlap are read (the deepest).
pub const MAX_OVERLAP_ROWS: usize = 64;
/// Least-waiting units read per board shard (two read 24 units a decision instead of 16 for
/// 0 to 9 fewer misses in 4,800 differential decisions, `differential.rs`).
const BOARD_PER_SHARD: usize = 1;

/// One unit as a decision reads it.
#[derive(Debug, Clone, Copy)]
pub struct UnitRow {
    /// Position of the unit's worker among the candidates.
    pub candidate: usize,
    pub unit: Unit,
    /// Worker's KV capacity in blocks (server info), if known.
    pub capacity: Option<u64>,
    pub overlap: Option<UnitOverlap>,
    pub load: LoadView,
    pub speed: Speed,
    pub turnover: Option<Turnover>,
    /// Share of the unit's recent predictions its store events confirmed (1 when the row has
    /// no predicted block past what is held, the unit has no event feed to confirm them, or
    /// the credit is `full`, which does not weigh it).
    pub confirm_ratio: f64,
}

impl UnitRow {
    /// The cost inputs of a `request_blocks` request before pressure and tiers.
    pub fn inputs(&self, request_blocks: u32) -> UnitInputs {
        let ov = self.overlap;
        UnitInputs {
            request_blocks,
            cached: ov.map_or(0, |o| o.cached()),
            inflight_depth: ov.map_or(0, |o| o.inflight),
            active_blocks: self.load.other_blocks,
            active_requests: self.load.requests,
            lost: 0,
            displaced: 0,
            lower_tier: 0.0,
        }
    }
}

/// The state every decision reads (shared with the bookings, which refile their unit on the
/// board when they end).
pub struct UnitReader {
    pub index: Arc<KvIndex>,
    pub loads: Arc<UnitLoads>,
    pub rates: Option<Arc<UnitRates>>,
    pub pressure: Option<Arc<UnitPressure>>,
    pub board: UnitBoard,
    /// The cost weights (the wait reads the decode and queue ones).
    pub weights: CostWeights,
    /// Read each unit's prediction confirm ratio (only `--predict-credit learned` weighs it).
    pub weigh_predictions: bool,
    /// The board sweep's cursor over the candidates.
    pub sweep: AtomicUsize,
}

impl UnitReader {
    /// The unit's row for a request with prompt key `prompt`.
    pub fn row(
        &self,
        candidate: usize,
        worker: &Worker,
        rank: Rank,
        overlap: Option<UnitOverlap>,
        prompt: Option<u64>,
    ) -> UnitRow {
        let page = u64::from(self.index.page_size().max(1));
        UnitRow {
            candidate,
            unit: Unit::new(worker.id, rank),
            capacity: worker.info.max_total_num_tokens.map(|t| t / page),
            overlap,
            load: self.loads.view(worker.id, rank, prompt),
            speed: self
                .rates
                .as_ref()
                .map_or(Speed::UNIT, |r| r.speed(worker.id, rank)),
            turnover: self.pressure.as_ref().map(|p| p.view(worker.id, rank)),
            confirm_ratio: match overlap {
                Some(o) if self.weigh_predictions && o.predicted > o.confirmed.max(o.inflight) => {
                    self.index
                        .prediction_calibration(worker.id, rank, Instant::now().into_std())
                        .confirm_ratio
                }
                _ => 1.0,
            },
        }
    }

    /// A row's wait (its load terms): its key on the board. Only for a row read with no
    /// siblings in flight (a request's view of a unit leaves its siblings' blocks out).
    pub fn board_wait(&self, row: &UnitRow) -> f64 {
        wait(&self.weights, &row.inputs(0), row.speed)
    }

    /// The sweep's next start (advanced by `n`).
    pub fn next_sweep(&self, n: usize) -> usize {
        self.sweep.fetch_add(n, Ordering::Relaxed)
    }

    /// Files `worker`'s `rank` on the board at its current wait.
    pub fn refile(&self, worker: &Worker, rank: Rank) {
        let row = self.row(0, worker, rank, None, None);
        self.board.file(row.unit, self.board_wait(&row));
    }

    /// The rows of the units that can win (see module docs). `extra` are units that must be
    /// read (lower-tier holders); `whole` forces a full read.
    pub fn rows(
        &self,
        candidates: &[Arc<Worker>],
        overlaps: &Overlaps,
        prompt: Option<u64>,
        preferred: Option<usize>,
        extra: &[Unit],
        whole: bool,
    ) -> Vec<UnitRow> {
        let by_unit = |u: Unit| {
            overlaps
                .units
                .binary_search_by_key(&u, |o| o.unit)
                .ok()
                .map(|i| overlaps.units[i])
        };
        debug_assert!(
            candidates.windows(2).all(|p| p[0].id < p[1].id),
            "candidates in id order (the registry's snapshot order)"
        );
        if whole || candidates.len() <= FULL_SCAN_WORKERS || self.board.len() < candidates.len() {
            let mut rows = Vec::with_capacity(candidates.len());
            for (i, w) in candidates.iter().enumerate() {
                for rank in w.ranks() {
                    rows.push(self.row(i, w, rank, by_unit(Unit::new(w.id, rank)), prompt));
                }
            }
            return rows;
        }
        let position = |u: Unit| {
            position_of(candidates, u.worker).filter(|&i| candidates[i].ranks().contains(&u.rank))
        };
        let mut units: Vec<Unit> = Vec::with_capacity(
            SHARDS * BOARD_PER_SHARD + overlaps.units.len().min(MAX_OVERLAP_ROWS) + 2 + extra.len(),
        );
        self.board
            .least(BOARD_PER_SHARD, |u| position(u).is_some(), &mut units);
        // Every other unit of a shard waits at least as long as that shard's picks: one no
        // deeper than a pick of its shard cannot beat it (a prefix every unit holds, such as a
        // shared system prompt, adds no rows).
        let mut floor = [0u32; SHARDS];
        for &u in &units {
            let d = by_unit(u).map_or(0, |o| depth(&o));
            let f = &mut floor[UnitBoard::shard_of(u)];
            *f = (*f).max(d);
        }
        // Not so a unit whose wait this request sees lower than its key: its prefill is in
        // flight there, or its whole prompt is predicted there (siblings may be in flight).
        let full = overlaps.request_blocks;
        let deeper: Vec<UnitOverlap> = overlaps
            .units
            .iter()
            .filter(|o| {
                o.inflight > 0
                    || o.predicted >= full
                    || depth(o) > floor[UnitBoard::shard_of(o.unit)]
            })
            .copied()
            .collect();
        units.extend(deepest(&deeper, MAX_OVERLAP_ROWS).map(|o| o.unit));
        if let Some(w) = preferred.and_then(|p| candidates.get(p)) {
            units.extend(w.ranks().map(|r| Unit::new(w.id, r)));
        }
        units.extend_from_slice(extra);
        units.sort_unstable();
        units.dedup();
        let rows: Vec<UnitRow> = units
            .into_iter()
            .filter_map(|u| {
                let i = position(u)?;
                Some(self.row(i, &candidates[i], u.rank, by_unit(u), prompt))
            })
            .collect();
        if rows.is_empty() {
            // Nothing on the board is a candidate (a new fleet): read it whole once.
            return self.rows(candidates, overlaps, prompt, preferred, extra, true);
        }
        rows
    }
}

/// Where worker `id` sits among `candidates` (sorted by id, ids unique). Each probe reads a
/// worker, a cache miss in a large fleet, so the search starts where a dense run of ids puts
/// it: ids are handed out in order, so `ids[j] - ids[0] >= j` and the worker is at
/// `id - ids[0]` unless ids below it are missing, in which case it is at most that many
/// places before. One probe for a fleet without gaps, a binary search over the gaps
/// otherwise (a plain binary search took ten probes at 1,000 workers, for every unit a
/// decision looked at).
pub(super) fn position_of(candidates: &[Arc<Worker>], id: WorkerId) -> Option<usize> {
    let first = candidates.first()?.id.0;
    let guess = usize::try_from(id.0.checked_sub(first)?)
        .ok()?
        .min(candidates.len() - 1);
    let at = candidates[guess].id.0;
    if at <= id.0 {
        // Below `id` only when `guess` is the last candidate: `id` is past them all.
        return (at == id.0).then_some(guess);
    }
    // `ids[guess] - ids[t] >= guess - t`: `t` lies in the window below `guess`.
    let gap = usize::try_from(at - id.0).unwrap_or(usize::MAX);
    let low = guess.saturating_sub(gap);
    candidates[low..guess]
        .binary_search_by_key(&id, |w| w.id)
        .ok()
        .map(|i| low + i)
}

/// Leading blocks cached or in flight.
fn depth(o: &UnitOverlap) -> u32 {
    o.cached().max(o.inflight)
}

/// The `n` deepest overlaps (all when there are fewer).
fn deepest(units: &[UnitOverlap], n: usize) -> impl Iterator<Item = &UnitOverlap> {
    let mut order: Vec<&UnitOverlap> = units.iter().collect();
    if order.len() > n {
        order.select_nth_unstable_by(n - 1, |a, b| depth(b).cmp(&depth(a)));
        order.truncate(n);
    }
    order.into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlap(w: u32, depth: u32) -> UnitOverlap {
        UnitOverlap {
            unit: Unit::new(WorkerId(w), 0),
            confirmed: depth,
            predicted: 0,
            inflight: 0,
        }
    }

    fn fleet(ids: &[u32]) -> Vec<Arc<Worker>> {
        ids.iter()
            .map(|&i| {
                let info = crate::workers::WorkerInfo::default();
                Arc::new(Worker::new(WorkerId(i), &format!("http://w{i}:1"), info))
            })
            .collect()
    }

    #[test]
    fn position_of_finds_every_candidate_with_and_without_gaps() {
        let dense: Vec<u32> = (1..=300).collect();
        let gappy: Vec<u32> = (1..=900).filter(|i| i % 7 != 0 && i % 50 > 8).collect();
        let sparse = [3u32, 40, 41, 1000, 70_000, u32::MAX];
        for ids in [&dense[..], &gappy[..], &sparse[..], &[5], &[]] {
            let candidates = fleet(ids);
            for probe in (0..1100).chain([69_999, 70_000, 70_001, u32::MAX - 1, u32::MAX]) {
                let want = candidates
                    .binary_search_by_key(&WorkerId(probe), |w| w.id)
                    .ok();
                assert_eq!(
                    position_of(&candidates, WorkerId(probe)),
                    want,
                    "{probe} in {ids:?}"
                );
            }
        }
    }

    #[test]
    fn deepest_keeps_the_n_deepest() {
        let units: Vec<UnitOverlap> = (0..100).map(|w| overlap(w, w % 10 + w / 50)).collect();
        let kept: Vec<u32> = deepest(&units, 5).map(|o| o.cached()).collect();
        assert_eq!(kept.len(), 5);
        assert!(kept.iter().all(|&d| d >= 10), "{kept:?}");
        assert_eq!(deepest(&units[..3], 5).count(), 3);
    }
}
