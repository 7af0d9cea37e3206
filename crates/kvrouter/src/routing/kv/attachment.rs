//! `KvAttachment`: what one KV-routed request carries in its routing `Booking`.
//!
//! - the predict-on-route booking in the index (`prefill_done` at the first response byte, or
//!   at routing for non-streaming requests; dropped before the first byte = the request failed
//!   before prefill: prediction cancelled),
//! - its share of the unit's load (requests, context blocks), released on drop,
//! - a read-only scan of the relayed bytes for the worker-reported `cached_tokens` (exported
//!   next to the router's own prediction when the response ends; not for approximate text
//!   routes, whose tokens the router never knew) and timings, which feed the
//!   unit's learned rates (`rates.rs`) when a successful response ends,
//! - the unit's refile on the board (`board.rs`) when its load changes: at the first byte (its
//!   prefill ended) and when the request ends.

use std::sync::Arc;

use kvrouter_index::IndexBooking;

use super::load::LoadGuard;
use super::metrics::KvMetrics;
use super::rates::RateProbe;
use super::read::UnitReader;
use super::scan::MetaScan;
use crate::routing::observer::RequestObserver;
use crate::workers::{Rank, Worker};

/// Files a booked unit on the board again now and when dropped (after the booking's load and
/// in-flight marks are released: it is the attachment's last field).
pub struct Refile {
    reader: Arc<UnitReader>,
    worker: Arc<Worker>,
    rank: Rank,
}

impl Refile {
    /// Files the unit at its current wait and returns the ticket that files it again on drop.
    pub fn new(reader: Arc<UnitReader>, worker: Arc<Worker>, rank: Rank) -> Refile {
        let r = Refile {
            reader,
            worker,
            rank,
        };
        r.now();
        r
    }

    fn now(&self) {
        self.reader.refile(&self.worker, self.rank);
    }
}

impl Drop for Refile {
    fn drop(&mut self) {
        self.now();
    }
}

/// Per-request KV routing state (see module docs).
pub struct KvAttachment {
    booking: Option<IndexBooking>,
    _load: LoadGuard,
    /// (predicted hit tokens, prompt tokens); `None` for an approximate text route, whose
    /// tokens the router never knew (kept out of the hit counters).
    hits: Option<(u64, u64)>,
    scan: MetaScan,
    rates: Option<RateProbe>,
    first_byte: bool,
    failed: bool,
    /// Last: dropped after the booking and the load guard.
    refile: Option<Refile>,
}

impl KvAttachment {
    pub(super) fn new(
        booking: Option<IndexBooking>,
        load: LoadGuard,
        hits: Option<(u64, u64)>,
        rates: Option<RateProbe>,
        refile: Option<Refile>,
    ) -> KvAttachment {
        KvAttachment {
            booking,
            _load: load,
            hits,
            scan: MetaScan::default(),
            rates,
            first_byte: false,
            failed: false,
            refile,
        }
    }

    /// Called with every relayed response chunk (never altered): the first one ends the
    /// prefill (in-flight marks), all are scanned for `cached_tokens`.
    pub fn observe(&mut self, chunk: &[u8]) {
        if !self.first_byte {
            self.first_byte = true;
            if let Some(b) = self.booking.as_mut() {
                b.prefill_done();
            }
            if let Some(r) = self.rates.as_mut() {
                r.first_byte();
            }
            if let Some(r) = &self.refile {
                r.now();
            }
        }
        self.scan.feed(chunk);
    }

    /// The worker answered with an error status: nothing was prefilled, drop the prediction.
    pub fn cancel_prediction(&mut self) {
        self.failed = true;
        if let Some(b) = self.booking.take() {
            b.cancel();
        }
    }

    /// Prefix-hit tokens the router expected for this request (`None`: approximate route).
    pub fn predicted_tokens(&self) -> Option<u64> {
        self.hits.map(|(predicted, _)| predicted)
    }

    /// The `cached_tokens` the worker reported so far, if any.
    pub fn reported_tokens(&self) -> Option<u64> {
        self.scan.cached_tokens()
    }
}

impl RequestObserver for KvAttachment {
    fn on_response_head(&mut self, status: http::StatusCode) {
        if !status.is_success() {
            // Nothing was prefilled: drop the KV prediction now.
            self.cancel_prediction();
        }
    }

    fn on_data(&mut self, chunk: &[u8]) {
        self.observe(chunk);
    }

    /// `None` for an approximate text route (its tokens are unknown to the router).
    fn kv_outcome(&self) -> Option<crate::routing::observer::KvOutcome> {
        let (predicted, prompt) = self.hits?;
        Some(crate::routing::observer::KvOutcome {
            prompt_tokens: prompt,
            completion_tokens: self
                .scan
                .get(super::scan::Field::CompletionTokens)
                .map(|v| v as u64),
            predicted_hit_tokens: predicted,
            reported_hit_tokens: self.scan.cached_tokens(),
        })
    }
}

impl Drop for KvAttachment {
    fn drop(&mut self) {
        if !self.first_byte {
            // Failed (or abandoned) before the first byte: nothing was prefilled.
            if let Some(b) = self.booking.take() {
                b.cancel();
            }
            return;
        }
        if self.failed {
            return;
        }
        if let Some(r) = &self.rates {
            r.finish(&self.scan);
        }
        let Some((predicted, prompt)) = self.hits else {
            return;
        };
        let m = KvMetrics::get();
        match self.scan.cached_tokens() {
            Some(actual) => {
                m.hits.predicted_hit_tokens.inc_by(predicted);
                m.hits.actual_hit_tokens.inc_by(actual);
                m.hits.prompt_tokens.inc_by(prompt);
                m.hits.hit_reports.with_label_values(&["reported"]).inc();
            }
            None => m.hits.hit_reports.with_label_values(&["missing"]).inc(),
        }
    }
}
