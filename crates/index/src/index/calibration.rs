//! How predictions turn out, per unit: of the blocks predict-on-route booked there that the
//! unit did not hold yet, how many the worker's own `BlockStored` events confirmed, after how
//! long, and how many ended unconfirmed (the TTL ran out, a `BlockRemoved` voided them, or the
//! request failed before prefill). From the recent outcomes (time-decayed counts) come the two
//! figures the router weighs a prediction by: the chance it is confirmed, and a TTL long enough
//! for nearly every prediction that will be confirmed (mean delay + 3 deviations).
//!
//! Delays are censored by the TTL itself: a prediction that expires unconfirmed at age `a` took
//! longer than `a`, and learning only from the confirmed ones would shorten the TTL, expire
//! more, and shorten it again. So an expiry is also a delay sample, imputed at twice its age:
//! while many expire the TTL grows geometrically until few do.
//!
//! A block is counted once per prediction lifetime on a unit: from the first booking that
//! predicts it there (beyond the prefix the unit already held or was predicted to hold) to its
//! first outcome.

use std::time::Duration;

use dashmap::DashMap;

use super::hashers::MulBuild;
use super::metrics::metrics;
use super::unit::UnitId;

/// Time constant of the recent counts, seconds.
const TAU_SECS: f64 = 30.0;
/// Prior of the confirm ratio: this many blocks' worth of "confirmed" before any outcome, so a
/// unit's first few outcomes do not swing it to 0 or 1.
const PRIOR_BLOCKS: f64 = 64.0;
/// Confirmation delays below this are taken as this (the TTL floor is this times 4).
const MIN_DELAY_SECS: f64 = 0.05;

/// How one prediction of one block on one unit ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Outcome {
    /// A `BlockStored` of the unit named the block, this long after the booking.
    Confirmed { after_ms: u64 },
    /// A `BlockRemoved` of the unit named it first.
    Removed,
    /// The TTL ran out first, this long after the booking.
    Expired { after_ms: u64 },
    /// The request failed before its prefill, or the unit left.
    Cancelled,
}

/// The prediction outcomes of one unit: totals since it appeared, and the learned figures.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PredictionCalibration {
    /// Blocks predicted there that the unit did not hold yet.
    pub booked: u64,
    pub confirmed: u64,
    pub removed: u64,
    pub expired: u64,
    pub cancelled: u64,
    /// Sum of the confirmation delays, seconds.
    pub confirm_secs_total: f64,
    /// Recent chance a prediction is confirmed (outcomes of the last ~30 s, cancellations
    /// left out: a failed request says nothing of the unit).
    pub confirm_ratio: f64,
    /// Recent mean confirmation delay, seconds (None before the first confirmation).
    pub confirm_secs: Option<f64>,
    /// The TTL the recent delays call for (None before the first confirmation).
    pub learned_ttl: Option<Duration>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Learned {
    totals: [u64; 5],
    confirm_secs_total: f64,
    /// Time-decayed counts: confirmed, ended unconfirmed; delay weight, sum, sum of squares.
    confirmed: f64,
    unconfirmed: f64,
    delay_n: f64,
    delay_sum: f64,
    delay_sq: f64,
    at_ms: u64,
}

impl Learned {
    fn decay(&mut self, now_ms: u64) {
        if now_ms > self.at_ms {
            let k = (-((now_ms - self.at_ms) as f64) / 1000.0 / TAU_SECS).exp();
            self.confirmed *= k;
            self.unconfirmed *= k;
            self.delay_n *= k;
            self.delay_sum *= k;
            self.delay_sq *= k;
            self.at_ms = now_ms;
        }
    }

    fn view(&self) -> PredictionCalibration {
        let [booked, confirmed, removed, expired, cancelled] = self.totals;
        let ratio =
            (self.confirmed + PRIOR_BLOCKS) / (self.confirmed + self.unconfirmed + PRIOR_BLOCKS);
        let (secs, ttl) = if self.delay_n > 1e-9 {
            let mean = (self.delay_sum / self.delay_n).max(MIN_DELAY_SECS);
            let var = (self.delay_sq / self.delay_n - mean * mean).max(0.0);
            let ttl = (mean + 3.0 * var.sqrt()).max(4.0 * MIN_DELAY_SECS);
            (Some(mean), Some(Duration::from_secs_f64(ttl.min(1e6))))
        } else {
            (None, None)
        };
        PredictionCalibration {
            booked,
            confirmed,
            removed,
            expired,
            cancelled,
            confirm_secs_total: self.confirm_secs_total,
            confirm_ratio: ratio.clamp(0.0, 1.0),
            confirm_secs: secs,
            learned_ttl: ttl,
        }
    }
}

/// Every unit's outcomes (see module docs).
#[derive(Default)]
pub(crate) struct Calibration {
    units: DashMap<UnitId, Learned, MulBuild>,
}

impl Calibration {
    /// `n` blocks were booked on `unit` that it did not hold yet.
    pub(crate) fn booked(&self, unit: UnitId, n: u64) {
        if n > 0 {
            self.units.entry(unit).or_default().totals[0] += n;
            metrics().predicted_booked.inc_by(n);
        }
    }

    /// `n` blocks' predictions on `unit` ended with `outcome` at `now_ms`.
    pub(crate) fn ended(&self, unit: UnitId, outcome: Outcome, n: u64, now_ms: u64) {
        if n == 0 {
            return;
        }
        let mut l = self.units.entry(unit).or_default();
        l.decay(now_ms);
        let m = metrics();
        match outcome {
            Outcome::Confirmed { after_ms } => {
                let secs = after_ms as f64 / 1000.0;
                l.totals[1] += n;
                l.confirm_secs_total += secs * n as f64;
                l.confirmed += n as f64;
                // One delay sample per store event (its blocks share one delay).
                l.delay_n += 1.0;
                l.delay_sum += secs;
                l.delay_sq += secs * secs;
                m.predicted_outcome[0].inc_by(n);
                m.confirm_seconds.observe(secs);
            }
            Outcome::Removed => {
                l.totals[2] += n;
                l.unconfirmed += n as f64;
                m.predicted_outcome[1].inc_by(n);
            }
            Outcome::Expired { after_ms } => {
                // Censored: it took longer than its age; imputed at twice that.
                let secs = 2.0 * after_ms as f64 / 1000.0;
                l.totals[3] += n;
                l.unconfirmed += n as f64;
                l.delay_n += 1.0;
                l.delay_sum += secs;
                l.delay_sq += secs * secs;
                m.predicted_outcome[2].inc_by(n);
            }
            Outcome::Cancelled => {
                l.totals[4] += n;
                m.predicted_outcome[3].inc_by(n);
            }
        }
    }

    /// The unit's outcomes and learned figures as of `now_ms` (the prior alone if none yet).
    pub(crate) fn view(&self, unit: UnitId, now_ms: u64) -> PredictionCalibration {
        let mut l = self.units.get(&unit).map(|l| *l).unwrap_or_default();
        l.decay(now_ms);
        l.view()
    }

    /// Every unit that has booked a prediction, with its view.
    pub(crate) fn all(&self, now_ms: u64) -> Vec<(UnitId, PredictionCalibration)> {
        let mut out: Vec<(UnitId, PredictionCalibration)> = self
            .units
            .iter()
            .map(|e| {
                let mut l = *e.value();
                l.decay(now_ms);
                (*e.key(), l.view())
            })
            .collect();
        out.sort_by_key(|(id, _)| *id);
        out
    }

    /// Forgets `unit` (its worker left).
    pub(crate) fn forget(&self, unit: UnitId) {
        self.units.remove(&unit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prior_gives_full_credit_and_no_ttl() {
        let c = Calibration::default();
        let v = c.view(7, 0);
        assert_eq!(v.confirm_ratio, 1.0);
        assert_eq!((v.confirm_secs, v.learned_ttl), (None, None));
    }

    #[test]
    fn outcomes_set_the_ratio_and_delays_the_ttl() {
        let c = Calibration::default();
        c.booked(1, 256);
        for after_ms in [100, 200, 300] {
            c.ended(1, Outcome::Confirmed { after_ms }, 64, 1000);
        }
        // A failed request is not the unit's miss.
        c.ended(1, Outcome::Cancelled, 500, 1000);
        let v = c.view(1, 1000);
        assert_eq!((v.booked, v.confirmed, v.cancelled), (256, 192, 500));
        let mean = v.confirm_secs.expect("a delay");
        assert!((mean - 0.2).abs() < 1e-9);
        // mean + 3 sd of 0.1, 0.2, 0.3 (population sd 0.0816...)
        let ttl = v.learned_ttl.expect("a ttl").as_secs_f64();
        assert!(
            (ttl - (0.2 + 3.0 * (0.02f64 / 3.0).sqrt())).abs() < 1e-6,
            "{ttl}"
        );
        c.ended(1, Outcome::Expired { after_ms: 300 }, 64, 1000);
        let v = c.view(1, 1000);
        assert_eq!(v.expired, 64);
        // (192 + 64 prior) / (256 + 64 prior)
        assert!((v.confirm_ratio - 256.0 / 320.0).abs() < 1e-9, "{v:?}");
        // The expiry at 0.3 s counts as a 0.6 s delay: the TTL grows past it.
        assert!(v.learned_ttl.expect("a ttl").as_secs_f64() > 0.6, "{v:?}");
    }

    #[test]
    fn a_ttl_shorter_than_the_delays_grows_until_few_expire() {
        // Every prediction takes 1 s to confirm; the TTL starts at 50 ms.
        let c = Calibration::default();
        let (mut ttl_ms, mut now) = (50u64, 0u64);
        for _ in 0..40 {
            now += 100;
            if ttl_ms < 1000 {
                c.ended(1, Outcome::Expired { after_ms: ttl_ms }, 16, now);
            } else {
                c.ended(1, Outcome::Confirmed { after_ms: 1000 }, 16, now);
            }
            let v = c.view(1, now);
            ttl_ms = v.learned_ttl.map_or(ttl_ms, |t| t.as_millis() as u64);
        }
        assert!(
            ttl_ms >= 1000,
            "the TTL stayed below the delay: {ttl_ms} ms"
        );
    }

    #[test]
    fn old_outcomes_fade() {
        let c = Calibration::default();
        c.ended(1, Outcome::Expired { after_ms: 10 }, 1000, 0);
        let early = c.view(1, 0).confirm_ratio;
        assert!(early < 0.1, "{early}");
        // Five time constants later the misses weigh under 1%: the prior is back.
        let later = c.view(1, 5 * 30_000).confirm_ratio;
        assert!(later > 0.85, "{later}");
    }

    #[test]
    fn a_forgotten_unit_starts_over() {
        let c = Calibration::default();
        c.ended(3, Outcome::Removed, 10, 0);
        c.forget(3);
        assert_eq!(
            c.view(3, 0),
            PredictionCalibration {
                confirm_ratio: 1.0,
                ..PredictionCalibration::default()
            }
        );
    }
}
