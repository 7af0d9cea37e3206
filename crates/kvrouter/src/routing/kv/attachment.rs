//! `KvAttachment`: what one KV-routed request carries in its routing `Booking`.
//!
//! - the predict-on-route booking in the index (`prefill_done` at the first response byte, or
//!   at routing for non-streaming requests; dropped before the first byte = the request failed
//!   before prefill: prediction cancelled; at the first byte of a stream the prediction must be
//!   confirmed by a `BlockStored` within `--predict-confirm-secs` or it stops counting),
//! - its share of the unit's load (requests, context blocks), released on drop,
//! - a read-only scan of the relayed bytes for the worker-reported `cached_tokens` (exported
//!   next to the router's own prediction when the response ends) and `completion_tokens`,
//! - its timing probe: when a successful response ends, what the router saw (time to the
//!   first chunk, to the end, prefill tokens, the unit's load) feeds the learned rates.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::load::{LoadGuard, UnitLoads};
use super::metrics::KvMetrics;
use super::scan::{FieldScan, CACHED_TOKENS, COMPLETION_TOKENS};
use super::timing::{Observation, TimingModel};
use crate::index::{self, Unit};
use crate::routing::observer::RequestObserver;

/// What the timing model needs to learn from one request (see module docs).
pub(super) struct TimingProbe {
    pub model: Arc<TimingModel>,
    pub loads: Arc<UnitLoads>,
    pub unit: Unit,
    pub page: u64,
    pub routed_at: Instant,
    pub stream: bool,
    /// Other requests' prefill tokens in flight on the unit when it was routed.
    pub queued_tokens: f64,
    /// Tokens the router expected it to prefill (used when the worker reports no hit).
    pub new_tokens: f64,
    /// Context tokens in flight on the unit right after it was booked (its own included).
    pub active_tokens: f64,
    /// `--predict-confirm-secs`.
    pub confirm: Duration,
}

/// Per-request KV routing state (see module docs).
pub struct KvAttachment {
    booking: Option<index::IndexBooking>,
    _load: LoadGuard,
    predicted_tokens: u64,
    prompt_tokens: u64,
    scan: FieldScan,
    output: FieldScan,
    probe: TimingProbe,
    first_byte: Option<Instant>,
    failed: bool,
}

impl KvAttachment {
    pub(super) fn new(
        booking: Option<index::IndexBooking>,
        load: LoadGuard,
        predicted_tokens: u64,
        prompt_tokens: u64,
        probe: TimingProbe,
    ) -> KvAttachment {
        KvAttachment {
            booking,
            _load: load,
            predicted_tokens,
            prompt_tokens,
            scan: FieldScan::new(CACHED_TOKENS),
            output: FieldScan::new(COMPLETION_TOKENS),
            probe,
            first_byte: None,
            failed: false,
        }
    }

    /// Called with every relayed response chunk (never altered): the first one ends the
    /// prefill (in-flight marks), all are scanned for `cached_tokens` and `completion_tokens`.
    pub fn observe(&mut self, chunk: &[u8]) {
        if self.first_byte.is_none() {
            self.first_byte = Some(Instant::now());
            if let Some(b) = self.booking.as_mut() {
                b.prefill_done();
                if self.probe.stream {
                    b.confirm_within(self.probe.confirm);
                }
            }
        }
        self.scan.feed(chunk);
        self.output.feed(chunk);
    }

    /// The worker answered with an error status: nothing was prefilled, drop the prediction.
    pub fn cancel_prediction(&mut self) {
        self.failed = true;
        if let Some(b) = self.booking.take() {
            b.cancel();
        }
    }

    /// Prefix-hit tokens the router expected for this request.
    pub fn predicted_tokens(&self) -> u64 {
        self.predicted_tokens
    }

    /// The `cached_tokens` the worker reported so far, if any.
    pub fn reported_tokens(&self) -> Option<u64> {
        self.scan.value()
    }

    /// What the router saw of this (successful, ended) request.
    fn observation(&self, first_byte: Instant, now: Instant) -> Observation {
        let p = &self.probe;
        let own = match self.scan.value() {
            Some(cached) => self.prompt_tokens.saturating_sub(cached) as f64,
            None => p.new_tokens,
        };
        let active_end = (p.loads.blocks(p.unit.worker, p.unit.rank) * p.page) as f64;
        Observation {
            unit: p.unit,
            prefill_tokens: p.queued_tokens + own,
            ttft: p
                .stream
                .then(|| first_byte.saturating_duration_since(p.routed_at)),
            e2e: now.saturating_duration_since(p.routed_at),
            output_tokens: self.output.value(),
            active_tokens: (p.active_tokens + active_end) / 2.0,
        }
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
}

impl Drop for KvAttachment {
    fn drop(&mut self) {
        let Some(first_byte) = self.first_byte else {
            // Failed (or abandoned) before the first byte: nothing was prefilled.
            if let Some(b) = self.booking.take() {
                b.cancel();
            }
            return;
        };
        if self.failed {
            return;
        }
        let obs = self.observation(first_byte, Instant::now());
        self.probe.model.observe(&obs);
        let m = KvMetrics::get();
        match self.scan.value() {
            Some(actual) => {
                m.predicted_hit_tokens.inc_by(self.predicted_tokens);
                m.actual_hit_tokens.inc_by(actual);
                m.prompt_tokens.inc_by(self.prompt_tokens);
                m.hit_reports.with_label_values(&["reported"]).inc();
            }
            None => m.hit_reports.with_label_values(&["missing"]).inc(),
        }
    }
}
