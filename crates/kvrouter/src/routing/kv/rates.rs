//! Per-(worker, rank) prefill and decode rates learned online from what the responses report,
//! and the speed factors the cost model scales a unit's terms by.
//!
//! Samples (taken when a KV-routed response ends, `RateProbe::finish`):
//! - **prefill**: seconds per uncached block. Seconds = SGLang's `prefill_launch_latency` (the
//!   forward pass that completed the prompt); without it, a stream's time to first byte when the
//!   unit had nothing else in flight at routing (no queue in it). Blocks =
//!   `(prompt_tokens - cached_tokens) / page`; samples under one block are skipped.
//! - **decode**: seconds per output token after the first. Seconds = `e2e_latency` minus
//!   `queue_time + prefill_launch_delay + prefill_launch_latency`; without them, a stream's end
//!   minus its first byte. Responses with fewer than 2 `completion_tokens` are skipped.
//!
//! Estimator: per unit and kind, the ratio of sums (seconds / work) over the last `window`
//! samples (bounded memory, large requests weigh more, so the fixed per-pass overhead of tiny
//! prompts does not dominate), each sample clipped to `[rate / CLIP, rate * CLIP]` of the
//! current estimate once it has `min_samples`. Requests prefilled in one forward pass all report
//! that pass's latency: a prefill sample whose seconds equal (bit for bit) one in the window is
//! the same pass, so its blocks join that sample instead of counting the pass time again
//! (otherwise a unit with longer queues, hence bigger batches, would look slower than it is).
//!
//! Factors (recomputed by [`UnitRates::refresh`] on the KV runtime's 500 ms timer): a unit's
//! rate over the fleet's reference (the lower median of the units with `min_samples`), **snapped
//! to 1 unless it leaves `[1 / tolerance, tolerance]`**, with hysteresis: a scaled unit stays
//! scaled until its ratio is back inside `[1 / exit, exit]`, `exit = (1 + tolerance) / 2` (a slow
//! unit sent less work measures a little faster, which must not flip it back and forth). Units
//! not yet measured, or fleets with fewer than two measured units, get 1: the fleet-wide prior.
//! On a homogeneous fleet every factor is 1, so the cost (and every decision) equals the
//! block-count model's; only a unit clearly slower or faster than its peers is scaled. Rates
//! never come from a worker's configuration.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::unit_map::UnitMap;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::metrics::KvMetrics;
use super::scan::{Field, MetaScan};
use crate::workers::{Rank, WorkerId};

/// A sample further than this factor from the unit's current estimate is clipped to it.
const CLIP: f64 = 4.0;

/// Estimator settings (from `settings::KvConfig`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateSettings {
    /// Scale costs by learned factors (`--kv-learn-rates`); false keeps every factor at 1.
    pub enabled: bool,
    /// Samples kept per unit and kind.
    pub window: usize,
    /// Samples a unit needs before its rate counts.
    pub min_samples: usize,
    /// Factors inside `[1 / tolerance, tolerance]` are 1 (`--kv-rate-tolerance`).
    pub tolerance: f64,
}

impl Default for RateSettings {
    fn default() -> Self {
        RateSettings {
            enabled: true,
            window: 64,
            min_samples: 16,
            tolerance: 2.0,
        }
    }
}

/// How much slower (> 1) or faster (< 1) than the fleet's reference a unit prefills and decodes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Speed {
    pub prefill: f64,
    pub decode: f64,
}

impl Speed {
    /// The fleet's reference speed (the prior).
    pub const UNIT: Speed = Speed {
        prefill: 1.0,
        decode: 1.0,
    };
}

/// Ratio-of-sums estimator over the last `cap` samples.
#[derive(Debug, Default)]
struct Ring {
    samples: VecDeque<(f64, f64)>,
    /// Per sample: the raw seconds' bits of a prefill pass (0: never merged).
    keys: VecDeque<u64>,
}

impl Ring {
    fn rate(&self) -> Option<f64> {
        let (secs, work) = self
            .samples
            .iter()
            .fold((0.0, 0.0), |(s, w), (a, b)| (s + a, w + b));
        (work > 0.0).then(|| secs / work)
    }

    fn push(&mut self, secs: f64, work: f64, s: &RateSettings) {
        self.push_keyed(secs, work, 0, s);
    }

    /// A prefill sample: merged into the window's sample of the same pass (same seconds).
    fn push_pass(&mut self, secs: f64, work: f64, s: &RateSettings) {
        let key = secs.to_bits();
        if secs > 0.0 && work.is_finite() && work > 0.0 {
            if let Some(i) = self.keys.iter().rposition(|k| *k == key) {
                self.samples[i].1 += work;
                return;
            }
        }
        self.push_keyed(secs, work, key, s);
    }

    fn push_keyed(&mut self, secs: f64, work: f64, key: u64, s: &RateSettings) {
        if !(secs.is_finite() && work.is_finite() && secs >= 0.0 && work > 0.0) {
            return;
        }
        let secs = match self.rate() {
            Some(r) if self.samples.len() >= s.min_samples && r > 0.0 => {
                secs.clamp(r * work / CLIP, r * work * CLIP)
            }
            _ => secs,
        };
        self.samples.push_back((secs, work));
        self.keys.push_back(key);
        while self.samples.len() > s.window.max(1) {
            self.samples.pop_front();
            self.keys.pop_front();
        }
    }

    /// The rate once there are `min` samples.
    fn settled(&self, min: usize) -> Option<f64> {
        (self.samples.len() >= min.max(1))
            .then(|| self.rate())
            .flatten()
    }
}

#[derive(Debug, Default)]
struct Windows {
    prefill: Ring,
    decode: Ring,
}

/// One unit's estimators and current factors.
#[derive(Debug)]
pub struct UnitRate {
    url: String,
    rank: Rank,
    settings: RateSettings,
    windows: Mutex<Windows>,
    /// f64 bits of [`Speed::prefill`] / [`Speed::decode`].
    prefill_factor: AtomicU64,
    decode_factor: AtomicU64,
}

impl UnitRate {
    fn new(url: &str, rank: Rank, settings: RateSettings) -> UnitRate {
        UnitRate {
            url: url.to_owned(),
            rank,
            settings,
            windows: Mutex::new(Windows::default()),
            prefill_factor: AtomicU64::new(1f64.to_bits()),
            decode_factor: AtomicU64::new(1f64.to_bits()),
        }
    }

    /// `secs` of prefill for `blocks` uncached blocks.
    pub fn observe_prefill(&self, secs: f64, blocks: f64) {
        self.windows
            .lock()
            .prefill
            .push_pass(secs, blocks, &self.settings);
    }

    /// `secs` of decode for `tokens` output tokens.
    pub fn observe_decode(&self, secs: f64, tokens: f64) {
        self.windows
            .lock()
            .decode
            .push(secs, tokens, &self.settings);
    }

    fn speed(&self) -> Speed {
        Speed {
            prefill: f64::from_bits(self.prefill_factor.load(Ordering::Relaxed)),
            decode: f64::from_bits(self.decode_factor.load(Ordering::Relaxed)),
        }
    }

    /// (prefill seconds per block, decode seconds per token), once settled.
    fn rates(&self) -> (Option<f64>, Option<f64>) {
        let w = self.windows.lock();
        let min = self.settings.min_samples;
        (w.prefill.settled(min), w.decode.settled(min))
    }
}

/// One unit's rates and factors, for `/debug/index` and tests.
#[derive(Debug, Clone, PartialEq)]
pub struct RateView {
    pub url: String,
    pub rank: Rank,
    pub prefill_seconds_per_block: Option<f64>,
    pub decode_seconds_per_token: Option<f64>,
    pub speed: Speed,
}

/// Every unit's estimators (see module docs).
#[derive(Debug, Default)]
pub struct UnitRates {
    settings: RateSettings,
    units: UnitMap<(WorkerId, Rank), Arc<UnitRate>>,
    /// f64 bits of the fleet reference's prefill seconds per block (0: not measured yet).
    reference_prefill: AtomicU64,
}

impl UnitRates {
    pub fn new(settings: RateSettings) -> UnitRates {
        UnitRates {
            settings,
            units: UnitMap::default(),
            reference_prefill: AtomicU64::new(0),
        }
    }

    /// The unit's estimator, created on first use (`url` labels its gauges).
    pub fn unit(&self, worker: WorkerId, url: &str, rank: Rank) -> Arc<UnitRate> {
        if let Some(u) = self.units.get(&(worker, rank)) {
            return u.clone();
        }
        self.units
            .entry((worker, rank))
            .or_insert_with(|| Arc::new(UnitRate::new(url, rank, self.settings)))
            .clone()
    }

    /// The unit's current factors ([`Speed::UNIT`] until it is measured and clearly different).
    pub fn speed(&self, worker: WorkerId, rank: Rank) -> Speed {
        self.units
            .get(&(worker, rank))
            .map_or(Speed::UNIT, |u| u.speed())
    }

    /// The fleet reference's prefill seconds per block (what one unit of cost takes), once
    /// measured: turns the cost model's work ahead of a request into seconds.
    pub fn reference_prefill_secs(&self) -> Option<f64> {
        let s = f64::from_bits(self.reference_prefill.load(Ordering::Relaxed));
        (s > 0.0 && s.is_finite()).then_some(s)
    }

    /// Sets the reference prefill seconds per block (tests of what is built on it).
    #[cfg(test)]
    pub(crate) fn set_reference_prefill_secs(&self, secs: f64) {
        self.reference_prefill
            .store(secs.to_bits(), Ordering::Relaxed);
    }

    /// Recomputes every unit's factors against the fleet reference, and the gauges.
    pub fn refresh(&self) {
        let units: Vec<Arc<UnitRate>> = self.units.iter().map(|e| e.value().clone()).collect();
        let rates: Vec<(Option<f64>, Option<f64>)> = units.iter().map(|u| u.rates()).collect();
        let prefill_ref = reference(rates.iter().filter_map(|r| r.0));
        let decode_ref = reference(rates.iter().filter_map(|r| r.1));
        self.reference_prefill
            .store(prefill_ref.unwrap_or(0.0).to_bits(), Ordering::Relaxed);
        let m = KvMetrics::get();
        for (u, (p, d)) in units.iter().zip(rates) {
            let rank = u.rank.to_string();
            let labels = [u.url.as_str(), rank.as_str()];
            let old = u.speed();
            let new = Speed {
                prefill: self.factor(p, prefill_ref, old.prefill),
                decode: self.factor(d, decode_ref, old.decode),
            };
            u.prefill_factor
                .store(new.prefill.to_bits(), Ordering::Relaxed);
            u.decode_factor
                .store(new.decode.to_bits(), Ordering::Relaxed);
            let scaled = |s: Speed| (s.prefill != 1.0, s.decode != 1.0);
            if scaled(new) != scaled(old) {
                m.units.speed_changes.inc();
                tracing::info!(worker = %u.url, rank = u.rank, prefill = new.prefill,
                    decode = new.decode, "KV unit speed factors changed");
            }
            if let Some(p) = p {
                m.units.prefill_rate.with_label_values(&labels).set(p);
            }
            if let Some(d) = d {
                m.units.decode_rate.with_label_values(&labels).set(d);
            }
            m.units
                .speed
                .with_label_values(&[labels[0], labels[1], "prefill"])
                .set(new.prefill);
            m.units
                .speed
                .with_label_values(&[labels[0], labels[1], "decode"])
                .set(new.decode);
        }
    }

    /// The factor for `rate` against `reference`, given the unit's current factor `old`.
    fn factor(&self, rate: Option<f64>, reference: Option<f64>, old: f64) -> f64 {
        match (rate, reference) {
            (Some(r), Some(base)) if self.settings.enabled && base > 0.0 => {
                let f = r / base;
                let tol = self.settings.tolerance.max(1.0);
                // Entering the scaled state needs `tolerance`; leaving it, `exit`.
                let band = if old == 1.0 { tol } else { (1.0 + tol) / 2.0 };
                if f.is_finite() && (f > band || f < 1.0 / band) {
                    f
                } else {
                    1.0
                }
            }
            _ => 1.0,
        }
    }

    /// Every unit's rates and factors, sorted by (url, rank).
    pub fn views(&self) -> Vec<RateView> {
        let mut v: Vec<RateView> = self
            .units
            .iter()
            .map(|e| {
                let u = e.value();
                let (p, d) = u.rates();
                RateView {
                    url: u.url.clone(),
                    rank: u.rank,
                    prefill_seconds_per_block: p,
                    decode_seconds_per_token: d,
                    speed: u.speed(),
                }
            })
            .collect();
        v.sort_by(|a, b| (&a.url, a.rank).cmp(&(&b.url, b.rank)));
        v
    }

    /// Forgets a removed worker's units and their gauges.
    pub fn remove_worker(&self, worker: WorkerId) {
        let m = KvMetrics::get();
        self.units.retain(|(w, _), u| {
            if *w != worker {
                return true;
            }
            let rank = u.rank.to_string();
            let _ = m.units.prefill_rate.remove_label_values(&[&u.url, &rank]);
            let _ = m.units.decode_rate.remove_label_values(&[&u.url, &rank]);
            for kind in ["prefill", "decode"] {
                let _ = m.units.speed.remove_label_values(&[&u.url, &rank, kind]);
            }
            false
        });
    }
}

/// The lower median of the measured units' rates; None with fewer than two.
fn reference(rates: impl Iterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = rates.filter(|r| r.is_finite() && *r > 0.0).collect();
    if v.len() < 2 {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[(v.len() - 1) / 2])
}

/// What one request tells its unit's estimator when its response ends (see module docs).
#[derive(Debug)]
pub struct RateProbe {
    unit: Arc<UnitRate>,
    page: f64,
    routed: Instant,
    first_byte: Option<Instant>,
    stream: bool,
    /// Nothing else was in flight on the unit when this request was routed.
    idle: bool,
}

impl RateProbe {
    pub fn new(unit: Arc<UnitRate>, page: u32, stream: bool, idle: bool) -> RateProbe {
        RateProbe {
            unit,
            page: f64::from(page.max(1)),
            routed: Instant::now(),
            first_byte: None,
            stream,
            idle,
        }
    }

    /// The first response byte was relayed now.
    pub fn first_byte(&mut self) {
        self.first_byte.get_or_insert_with(Instant::now);
    }

    /// The response ended (completely, 2xx) with `scan` seen: feed the unit's estimators.
    pub fn finish(&self, scan: &MetaScan) {
        self.finish_at(scan, Instant::now());
    }

    fn finish_at(&self, scan: &MetaScan, end: Instant) {
        let streamed = |from: Instant, to: Instant| {
            (self.stream && to > from).then(|| (to - from).as_secs_f64())
        };
        let first = self.first_byte;
        let timing = |f| scan.get(f);
        if let Some(prompt) = scan.get(Field::PromptTokens) {
            let blocks = (prompt - scan.get(Field::CachedTokens).unwrap_or(0.0)) / self.page;
            let secs = timing(Field::PrefillLaunchLatency).or_else(|| {
                first
                    .filter(|_| self.idle)
                    .and_then(|f| streamed(self.routed, f))
            });
            if let (Some(secs), true) = (secs, blocks >= 1.0) {
                self.unit.observe_prefill(secs, blocks);
            }
        }
        let completion = scan.get(Field::CompletionTokens).unwrap_or(0.0);
        if completion >= 2.0 {
            let worker_side = match (
                timing(Field::E2eLatency),
                timing(Field::QueueTime),
                timing(Field::PrefillLaunchLatency),
            ) {
                (Some(e2e), Some(q), Some(p)) => {
                    Some(e2e - q - p - timing(Field::PrefillLaunchDelay).unwrap_or(0.0))
                }
                _ => None,
            };
            let secs = worker_side.or_else(|| first.and_then(|f| streamed(f, end)));
            if let Some(secs) = secs.filter(|s| *s > 0.0) {
                self.unit.observe_decode(secs, completion - 1.0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn settings() -> RateSettings {
        RateSettings {
            enabled: true,
            window: 8,
            min_samples: 4,
            tolerance: 1.5,
        }
    }

    #[test]
    fn ratio_of_sums_over_a_bounded_window_with_clipping() {
        let s = settings();
        let mut r = Ring::default();
        assert_eq!(r.settled(4), None);
        for _ in 0..4 {
            r.push(0.2, 10.0, &s);
        }
        assert_eq!(r.settled(4), Some(0.02));
        // An outlier 100x the rate is clipped to CLIP x.
        r.push(20.0, 10.0, &s);
        let want = (0.2 * 4.0 + 0.02 * 10.0 * CLIP) / 50.0;
        assert!((r.rate().unwrap() - want).abs() < 1e-12);
        for _ in 0..20 {
            r.push(0.1, 10.0, &s);
        }
        assert_eq!(r.samples.len(), 8);
        assert!((r.rate().unwrap() - 0.01).abs() < 1e-12);
        // Invalid samples are ignored.
        r.push(f64::NAN, 1.0, &s);
        r.push(1.0, 0.0, &s);
        r.push(-1.0, 1.0, &s);
        assert_eq!(r.samples.len(), 8);
    }

    #[test]
    fn requests_of_one_prefill_pass_count_its_time_once() {
        let s = settings();
        let mut r = Ring::default();
        // A pass of 0.03 s prefilled 3 requests of 10 blocks; another of 0.01 s one of 10.
        for _ in 0..3 {
            r.push_pass(0.03, 10.0, &s);
        }
        r.push_pass(0.01, 10.0, &s);
        assert_eq!(
            r.samples.iter().copied().collect::<Vec<_>>(),
            vec![(0.03, 30.0), (0.01, 10.0)]
        );
        assert!((r.rate().unwrap() - 0.001).abs() < 1e-12);
        // Decode samples never merge.
        let mut d = Ring::default();
        d.push(0.5, 10.0, &s);
        d.push(0.5, 10.0, &s);
        assert_eq!(d.samples.len(), 2);
    }

    fn fleet(rates: &[f64], s: RateSettings) -> UnitRates {
        let fleet = UnitRates::new(s);
        for (i, &rate) in rates.iter().enumerate() {
            let u = fleet.unit(WorkerId(i as u32), &format!("http://w{i}"), 0);
            for b in 10..14 {
                // Distinct seconds: distinct passes.
                u.observe_prefill(rate * f64::from(b), f64::from(b));
                u.observe_decode(rate, 1.0);
            }
        }
        fleet.refresh();
        fleet
    }

    #[test]
    fn close_rates_snap_to_one_and_a_slow_unit_is_scaled() {
        let f = fleet(&[0.010, 0.012, 0.009, 0.011], settings());
        for i in 0..4 {
            assert_eq!(f.speed(WorkerId(i), 0), Speed::UNIT);
        }
        let f = fleet(&[0.010, 0.010, 0.010, 0.025], settings());
        assert_eq!(f.speed(WorkerId(0), 0), Speed::UNIT);
        let slow = f.speed(WorkerId(3), 0);
        assert!((slow.prefill - 2.5).abs() < 1e-9, "{slow:?}");
        assert!((slow.decode - 2.5).abs() < 1e-9, "{slow:?}");
        // Unmeasured units and unknown workers keep the prior.
        assert_eq!(f.speed(WorkerId(9), 0), Speed::UNIT);
        let off = fleet(
            &[0.010, 0.010, 0.010, 0.025],
            RateSettings {
                enabled: false,
                ..settings()
            },
        );
        assert_eq!(off.speed(WorkerId(3), 0), Speed::UNIT);
        assert!(off.views()[3].prefill_seconds_per_block.is_some());
    }

    #[test]
    fn a_scaled_unit_stays_scaled_until_it_is_back_near_the_reference() {
        let f = fleet(&[0.010, 0.010, 0.010, 0.020], settings()); // 2 > 1.5: scaled
        let slow = f.unit(WorkerId(3), "http://w3", 0);
        let refill = |rate: f64| {
            for b in 10..18 {
                slow.observe_prefill(rate * f64::from(b), f64::from(b));
            }
            f.refresh();
            f.speed(WorkerId(3), 0).prefill
        };
        assert!((f.speed(WorkerId(3), 0).prefill - 2.0).abs() < 1e-9);
        // 1.3 is inside the entry band (1.5) but outside the exit band (1.25): stays scaled.
        assert!((refill(0.013) - 1.3).abs() < 1e-9);
        assert_eq!(refill(0.012), 1.0);
        // Back at 1.3 from the unscaled state: not scaled.
        assert_eq!(refill(0.013), 1.0);
    }

    #[test]
    fn one_measured_unit_has_no_reference() {
        let f = fleet(&[0.05], settings());
        assert_eq!(f.speed(WorkerId(0), 0), Speed::UNIT);
        f.remove_worker(WorkerId(0));
        assert!(f.views().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn stream_timings_are_read_on_the_runtime_clock() {
        use tokio::time::advance;
        let rates = UnitRates::new(settings());
        let unit = rates.unit(WorkerId(1), "http://w1", 0);
        // Routed onto an idle unit; first byte 30 ms later, the end 100 ms after that.
        let mut p = RateProbe::new(unit.clone(), 16, true, true);
        advance(Duration::from_millis(30)).await;
        p.first_byte();
        advance(Duration::from_millis(100)).await;
        p.first_byte(); // only the first one counts
        p.finish(&scan(
            r#"{"meta_info":{"prompt_tokens":48,"cached_tokens":0,"completion_tokens":5}}"#,
        ));
        let w = unit.windows.lock();
        // 3 blocks in 30 ms, 4 tokens in 100 ms: exact, since only the paused clock moved.
        assert_eq!(
            w.prefill.samples.iter().copied().collect::<Vec<_>>(),
            vec![(0.03, 3.0)]
        );
        assert_eq!(
            w.decode.samples.iter().copied().collect::<Vec<_>>(),
            vec![(0.1, 4.0)]
        );
    }

    fn scan(body: &str) -> MetaScan {
        let mut s = MetaScan::default();
        s.feed(body.as_bytes());
        s
    }

    #[test]
    fn probes_take_worker_timings_first_then_stream_timings() {
        let rates = UnitRates::new(settings());
        let unit = rates.unit(WorkerId(1), "http://w1", 0);
        // Worker-reported: 64 - 32 = 32 tokens = 2 blocks of 16 in 0.04 s; 11 tokens, decode
        // 1.0 - 0.1 - 0.04 - 0.06 = 0.8 s over 10.
        let p = RateProbe::new(unit.clone(), 16, false, false);
        p.finish(&scan(
            r#"{"meta_info":{"prompt_tokens":64,"cached_tokens":32,"completion_tokens":11,"queue_time":0.1,"prefill_launch_delay":0.06,"prefill_launch_latency":0.04,"e2e_latency":1.0}}"#,
        ));
        {
            let w = unit.windows.lock();
            assert_eq!(
                w.prefill.samples.iter().copied().collect::<Vec<_>>(),
                vec![(0.04, 2.0)]
            );
            let (secs, tokens) = w.decode.samples[0];
            assert!((secs - 0.8).abs() < 1e-9 && tokens == 10.0);
        }
        // Stream without timings, routed onto an idle unit: TTFT and end - first byte.
        let mut p = RateProbe::new(unit.clone(), 16, true, true);
        let t0 = p.routed;
        p.first_byte = Some(t0 + Duration::from_millis(30));
        p.finish_at(
            &scan(r#"{"meta_info":{"prompt_tokens":48,"cached_tokens":0,"completion_tokens":5}}"#),
            t0 + Duration::from_millis(130),
        );
        {
            let w = unit.windows.lock();
            assert_eq!(w.prefill.samples.len(), 2);
            let (secs, blocks) = w.prefill.samples[1];
            assert!((secs - 0.03).abs() < 1e-9 && blocks == 3.0);
            let (secs, tokens) = w.decode.samples[1];
            assert!((secs - 0.1).abs() < 1e-9 && tokens == 4.0);
        }
        // A busy unit's TTFT holds queueing: no prefill sample; a non-stream without timings
        // and a fully cached prompt give nothing.
        let mut p = RateProbe::new(unit.clone(), 16, true, false);
        p.first_byte();
        p.finish(&scan(
            r#"{"prompt_tokens":48,"cached_tokens":0,"completion_tokens":1}"#,
        ));
        let p = RateProbe::new(unit.clone(), 16, false, true);
        p.finish(&scan(r#"{"prompt_tokens":48,"cached_tokens":48,"prefill_launch_latency":0.01,"completion_tokens":9}"#));
        let w = unit.windows.lock();
        assert_eq!((w.prefill.samples.len(), w.decode.samples.len()), (2, 2));
    }
}
