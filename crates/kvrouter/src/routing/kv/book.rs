//! Stage 4 of a KV decision: every side effect of routing one request, in one place.
//!
//! - metrics: what was hashed, the stage timings, the rules' outcomes, the overlap found;
//! - the observed reuse fed to the KV pressure (`pressure.rs`);
//! - the predict-on-route booking in the index (only the blocks it prefills count as in
//!   flight; a non-streaming request's in-flight marks end at once, see below);
//! - a rate probe for the unit's learned speed (`rates.rs`);
//! - the unit's load (`load.rs`) and its new place on the board (`board.rs`);
//! - the sharing hook (`hook.rs`: other router replicas learn of the booking).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::attachment::{KvAttachment, Refile};
use super::decide::Decision;
use super::hook::{chain, BookingHook, BookingMade};
use super::metrics::{InputSource, KvMetrics};
use super::prompt::Prompt;
use super::rates::RateProbe;
use super::read::{position_of, UnitReader};
use super::score::Scored;
use super::PredictCredit;
use crate::routing::input::RoutingInput;
use crate::routing::policy::Choice;
use crate::workers::Worker;

/// What the book stage needs besides the decision.
pub(super) struct BookParams<'a> {
    pub reader: &'a Arc<UnitReader>,
    pub input: &'a RoutingInput<'a>,
    pub candidates: &'a [Arc<Worker>],
    pub prompt: &'a Prompt,
    pub predict_ttl: Option<Duration>,
    pub predict_credit: PredictCredit,
    pub hook: Option<&'a Arc<dyn BookingHook>>,
    /// The board is kept (the fleet is read through it): refile what the decision read.
    pub keep_board: bool,
}

/// Books `decision` (see module docs) and returns the routing choice.
pub(super) fn book(p: &BookParams<'_>, scored: &[Scored], decision: &Decision) -> Choice {
    let chosen = &scored[decision.chosen];
    let worker = &p.candidates[chosen.row.candidate];
    let rank = chosen.row.unit.rank;
    count(p, chosen, decision);
    let page = p.reader.index.page_size() as usize;
    let seqs = &p.prompt.seqs;
    let overlap = chosen.overlap();
    let now = Instant::now();
    let ttl = p.predict_ttl.map(|cap| match p.predict_credit {
        // The unit's learned TTL (the delay nearly every confirmation takes), at most the cap.
        PredictCredit::Learned => p
            .reader
            .index
            .prediction_calibration(worker.id, rank, now.into_std())
            .learned_ttl
            .map_or(cap, |t| t.min(cap)),
        PredictCredit::Full => cap,
    });
    // Its cached prefix (what the index holds there, whatever credit the score gave it) is
    // predicted for siblings but is no queued work for others. The whole prompt is booked,
    // the confirmed prefix too: under `full` credit a predicted block counts as just used
    // (head of the unit's LRU order, not at eviction risk in `score.rs`), which is what
    // SGLang's match_prefix does to it. Booking only the blocks past the confirmed depth
    // saved 10-13% of router CPU on agent sessions but lost hit rate on the trace at fits
    // (docs/benchmarks.md, predictions).
    let held = chosen.row.overlap.map_or(0, |o| o.cached().max(o.inflight)) as usize;
    let mut booking = match ttl {
        Some(ttl) if !seqs.is_empty() => p
            .reader
            .index
            .book_from_at(worker.id, rank, seqs, held, ttl, now.into_std())
            .ok(),
        _ => None,
    };
    if !p.input.stream {
        // A non-streaming response's first byte is its end, so it cannot tell when the
        // prefill ended: the in-flight mark ends now; the prediction (which siblings see as
        // cached) stays, and a failure before the first byte still cancels it.
        if let Some(b) = booking.as_mut() {
            b.prefill_done();
        }
    }
    let predicted = (u64::from(overlap) * page as u64).min(p.prompt.matchable_tokens(page));
    let probe = p.reader.rates.as_ref().map(|r| {
        let idle = p.reader.loads.view(worker.id, rank, None).requests == 0;
        let unit = r.unit(worker.id, &worker.url, rank);
        RateProbe::new(unit, p.reader.index.page_size(), p.input.stream, idle)
    });
    let request_blocks = seqs.len() as u32;
    let load = p
        .reader
        .loads
        .begin(worker.id, rank, p.prompt.key(), request_blocks);
    let refile = p.keep_board.then(|| {
        refile_read(p, scored);
        Refile::new(p.reader.clone(), worker.clone(), rank)
    });
    let shared = match (p.hook, &booking, ttl) {
        (Some(hook), Some(_), Some(ttl)) => hook.booking_made(&BookingMade {
            worker,
            rank,
            seqs,
            cached: held,
            ttl,
            prefilled: !p.input.stream,
        }),
        _ => None,
    };
    let hits = (p.prompt.source != InputSource::TextApprox)
        .then_some((predicted, p.prompt.tokens.len() as u64));
    let attachment = KvAttachment::new(booking, load, hits, probe, refile);
    Choice {
        index: chosen.row.candidate,
        rank: (worker.info.dp_size > 1).then_some(rank),
        observer: Some(chain(Box::new(attachment), shared)),
    }
}

/// The decision's counters.
fn count(p: &BookParams<'_>, chosen: &Scored, decision: &Decision) {
    let m = KvMetrics::get();
    m.input_source[p.prompt.source as usize].inc();
    if let Some(reason) = p.prompt.no_tokens {
        m.no_tokens.with_label_values(&[reason]).inc();
    }
    if let Some(spilled) = decision.blind_spilled {
        m.blind[usize::from(spilled)].inc();
    }
    match decision.sticky_kept {
        Some(true) => m.sticky.with_label_values(&["kept"]).inc(),
        Some(false) => m.sticky.with_label_values(&["yielded"]).inc(),
        None => {}
    }
    let request_blocks = chosen.inputs.request_blocks;
    if request_blocks > 0 {
        let found = f64::from(chosen.overlap()) / f64::from(request_blocks);
        m.request_blocks.observe(f64::from(request_blocks));
        m.overlap_ratio.observe(found);
        if let Some(pr) = &p.reader.pressure {
            pr.observe_reuse(found);
        }
    }
}

/// Files every unit the decision read at the wait it read (the chosen one after its booking,
/// through its [`Refile`]), the units whose engine reported its load since, and a few more of
/// the fleet in turn (the sweep).
fn refile_read(p: &BookParams<'_>, scored: &[Scored]) {
    for s in scored {
        if s.row.load.siblings == 0 {
            p.reader.board.file(s.row.unit, p.reader.board_wait(&s.row));
        } else {
            // This request's view left its siblings' blocks out: read the unit's own.
            let w = &p.candidates[s.row.candidate];
            p.reader.refile(w, s.row.unit.rank);
        }
    }
    for (worker, rank) in p.reader.loads.take_reported(REPORTED) {
        if let Some(i) = position_of(p.candidates, worker) {
            p.reader.refile(&p.candidates[i], rank);
        }
    }
    let n = p.candidates.len();
    let start = p.reader.next_sweep(SWEEP) % n.max(1);
    for w in p.candidates.iter().cycle().skip(start).take(SWEEP.min(n)) {
        for rank in w.ranks() {
            p.reader.refile(w, rank);
        }
    }
}

/// Workers refiled per decision by the sweep.
const SWEEP: usize = 4;
/// Reported units refiled per decision at most.
const REPORTED: usize = 16;
