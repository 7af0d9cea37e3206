//! `TimingModel`: each unit's prefill and decode rates, learned online from what the router
//! observes of the requests it routed (never from the worker's configuration), with a
//! fleet-wide fit as the prior of every unit, and the fleet's mean output length.
//!
//! ```text
//! ttft     = prefill_base + prefill_per_token * prefill_tokens   // queued ahead + own uncached
//! step     = step_base    + step_per_token    * active_tokens    // one decode step of the unit
//! e2e      = ttft + output_tokens * step
//! ```
//!
//! One robust RLS fit (`rls.rs`) of the four rates per unit and one for the fleet, fed by:
//! streaming responses: a TTFT sample (time to the first data chunk vs prefill tokens) and a
//! decode sample (`e2e - ttft` vs `(n - 1)` steps at the unit's mean active tokens); non-streaming
//! responses: one E2E sample over all four rates. A unit's rates blend its own fit with the
//! fleet's by its sample count (`n / (n + UNIT_PRIOR_SAMPLES)`), so a new or rarely used unit
//! starts from what the fleet does.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

use super::rls::Rls;
use crate::index::Unit;
use crate::workers::WorkerId;

/// Feature scales: parameters are in s, s per 1k prefill tokens, s per 100 steps and s per
/// 100 steps per 1M active tokens, so all are of order one and the fit is well conditioned.
const PREFILL_SCALE: f64 = 1e3;
const STEPS_SCALE: f64 = 1e2;
const ACTIVE_SCALE: f64 = 1e6;

/// The prior (an H100-class GPU serving an 8B model): 20 ms per prefill batch + 10k prefill
/// tokens/s; a 10 ms decode step + 20 ms per 1M tokens of KV read per step. Only the start:
/// a few dozen observed requests replace it.
const PRIOR: [f64; 4] = [0.02, 0.1, 1.0, 2.0];
/// Prior standard deviations (relative to one second of residual): weak, data dominate.
const PRIOR_STD: [f64; 4] = [1.0, 5.0, 20.0, 200.0];
/// Forgetting factor: the last ~200 samples dominate a fit.
const LAMBDA: f64 = 0.995;
/// A unit's own fit counts fully once it has many more samples than this.
const UNIT_PRIOR_SAMPLES: f64 = 32.0;
/// Weight of one response in the mean output length.
const OUTPUT_ALPHA: f64 = 0.02;
/// Expected output tokens before any response was seen.
const OUTPUT_PRIOR: f64 = 128.0;

/// Rates of one unit, in seconds and tokens (never negative).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    pub prefill_base: f64,
    pub prefill_per_token: f64,
    pub step_base: f64,
    pub step_per_token: f64,
}

impl Rates {
    fn from_theta(t: [f64; 4]) -> Rates {
        // A fit can wander below zero on little data: floor each rate at a small fraction of
        // the prior (time is never free, and a zero slope would disable a cost term).
        let floor = |i: usize| t[i].max(PRIOR[i] * 0.01);
        Rates {
            prefill_base: floor(0),
            prefill_per_token: floor(1) / PREFILL_SCALE,
            step_base: floor(2) / STEPS_SCALE,
            step_per_token: floor(3) / STEPS_SCALE / ACTIVE_SCALE,
        }
    }

    /// Seconds to prefill `tokens` (the first token's time when nothing else waits).
    pub fn prefill_secs(&self, tokens: f64) -> f64 {
        self.prefill_base + self.prefill_per_token * tokens
    }

    /// Seconds of one decode step with `active_tokens` of context in the running batch.
    pub fn step_secs(&self, active_tokens: f64) -> f64 {
        self.step_base + self.step_per_token * active_tokens
    }
}

/// What the router saw of one successful request (see module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    pub unit: Unit,
    /// Prefill tokens ahead of and including its own uncached ones, as it was routed.
    pub prefill_tokens: f64,
    /// Time to the first data chunk (streaming responses only).
    pub ttft: Option<Duration>,
    /// Routing to the end of the response.
    pub e2e: Duration,
    /// Output tokens the worker reported (`completion_tokens`), if any.
    pub output_tokens: Option<u64>,
    /// Mean context tokens in flight on the unit while it ran (its own included).
    pub active_tokens: f64,
}

type Fit = Rls<4>;

fn prior_fit() -> Fit {
    Rls::new(PRIOR, PRIOR_STD, LAMBDA)
}

/// All units' learned rates (see module docs).
pub struct TimingModel {
    fleet: Mutex<Fit>,
    units: RwLock<HashMap<Unit, Mutex<Fit>>>,
    output_mean: Mutex<Option<f64>>,
}

impl Default for TimingModel {
    fn default() -> Self {
        TimingModel {
            fleet: Mutex::new(prior_fit()),
            units: RwLock::new(HashMap::new()),
            output_mean: Mutex::new(None),
        }
    }
}

impl TimingModel {
    /// The rates to expect on `unit`.
    pub fn rates(&self, unit: Unit) -> Rates {
        let fleet = self.fleet.lock().theta();
        let Some((own, n)) = self.units.read().get(&unit).map(|f| {
            let f = f.lock();
            (f.theta(), f.samples() as f64)
        }) else {
            return Rates::from_theta(fleet);
        };
        let w = n / (n + UNIT_PRIOR_SAMPLES);
        Rates::from_theta(std::array::from_fn(|i| w * own[i] + (1.0 - w) * fleet[i]))
    }

    /// The fleet's mean output length in tokens.
    pub fn expected_output(&self) -> f64 {
        self.output_mean.lock().unwrap_or(OUTPUT_PRIOR)
    }

    /// Learns from one finished request.
    pub fn observe(&self, o: &Observation) {
        let samples = samples(o);
        if samples.is_empty() {
            return;
        }
        {
            let mut fleet = self.fleet.lock();
            for (x, y) in &samples {
                fleet.update(x, *y);
            }
        }
        if !self.units.read().contains_key(&o.unit) {
            // A new unit starts at the fleet's rates with the prior's uncertainty.
            let start = Rls::new(self.fleet.lock().theta(), PRIOR_STD, LAMBDA);
            self.units
                .write()
                .entry(o.unit)
                .or_insert_with(|| Mutex::new(start));
        }
        if let Some(fit) = self.units.read().get(&o.unit) {
            let mut fit = fit.lock();
            for (x, y) in &samples {
                fit.update(x, *y);
            }
        }
        if let Some(n) = o.output_tokens {
            let mut m = self.output_mean.lock();
            let n = n as f64;
            *m = Some(m.map_or(n, |m| m + OUTPUT_ALPHA * (n - m)));
        }
    }

    /// Forgets a removed unit's fit.
    pub fn remove_unit(&self, unit: Unit) {
        self.units.write().remove(&unit);
    }

    /// Forgets every fit of a removed worker.
    pub fn remove_worker(&self, worker: WorkerId) {
        self.units.write().retain(|u, _| u.worker != worker);
    }

    /// Samples the unit's own fit has absorbed.
    pub fn samples(&self, unit: Unit) -> u64 {
        self.units
            .read()
            .get(&unit)
            .map_or(0, |f| f.lock().samples())
    }
}

/// The regression samples `(features, seconds)` of one observation.
fn samples(o: &Observation) -> Vec<([f64; 4], f64)> {
    let prefill = o.prefill_tokens.max(0.0) / PREFILL_SCALE;
    let active = o.active_tokens.max(0.0) / ACTIVE_SCALE;
    let e2e = o.e2e.as_secs_f64();
    let mut out = Vec::with_capacity(2);
    match (o.ttft, o.output_tokens) {
        (Some(ttft), n) => {
            let ttft = ttft.as_secs_f64();
            out.push(([1.0, prefill, 0.0, 0.0], ttft));
            if let Some(n) = n.filter(|n| *n > 1) {
                let steps = (n - 1) as f64 / STEPS_SCALE;
                out.push(([0.0, 0.0, steps, steps * active], (e2e - ttft).max(0.0)));
            }
        }
        (None, Some(n)) => {
            let steps = n as f64 / STEPS_SCALE;
            out.push(([1.0, prefill, steps, steps * active], e2e));
        }
        (None, None) => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A synthetic unit: 5 ms + 20 us/token prefill, 6 ms + 0.4 us per active token decode.
    fn synthetic(rng: &mut impl Rng, unit: Unit, stream: bool, slow: f64) -> Observation {
        let prefill_tokens = rng.random_range(0.0..20_000.0);
        let active = rng.random_range(0.0..120_000.0);
        let n: u64 = rng.random_range(16..512);
        let ttft = slow * (0.005 + 20e-6 * prefill_tokens);
        let step = slow * (0.006 + 0.4e-6 * active);
        let noise = 1.0 + rng.random_range(-0.02..0.02);
        let e2e = (ttft + n as f64 * step) * noise;
        Observation {
            unit,
            prefill_tokens,
            ttft: stream.then(|| Duration::from_secs_f64(ttft * noise)),
            e2e: Duration::from_secs_f64(e2e),
            output_tokens: Some(n),
            active_tokens: active,
        }
    }

    fn close(got: f64, want: f64, rel: f64) -> bool {
        (got - want).abs() <= rel * want
    }

    #[test]
    fn learned_rates_converge_streaming_and_not() {
        for stream in [true, false] {
            let m = TimingModel::default();
            let unit = Unit::new(WorkerId(1), 0);
            let mut rng = rand::rngs::StdRng::seed_from_u64(1);
            for _ in 0..600 {
                m.observe(&synthetic(&mut rng, unit, stream, 1.0));
            }
            let r = m.rates(unit);
            // Without streaming the prefill is a small part of each E2E: weakly identified.
            let tol = if stream { 0.15 } else { 0.4 };
            assert!(close(r.prefill_per_token, 20e-6, tol), "{stream} {r:?}");
            assert!(close(r.step_base, 0.006, 0.15), "{stream} {r:?}");
            assert!(close(r.step_per_token, 0.4e-6, 0.15), "{stream} {r:?}");
            assert!(close(m.expected_output(), 264.0, 0.2));
        }
    }

    #[test]
    fn a_slow_unit_is_told_apart_and_a_new_unit_starts_from_the_fleet() {
        let m = TimingModel::default();
        let (fast, slow) = (Unit::new(WorkerId(1), 0), Unit::new(WorkerId(2), 0));
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        for _ in 0..800 {
            m.observe(&synthetic(&mut rng, fast, true, 1.0));
            m.observe(&synthetic(&mut rng, slow, true, 2.0));
        }
        let (f, s) = (m.rates(fast), m.rates(slow));
        assert!(s.step_per_token > 1.6 * f.step_per_token, "{f:?} {s:?}");
        assert!(
            s.prefill_per_token > 1.6 * f.prefill_per_token,
            "{f:?} {s:?}"
        );
        let new = m.rates(Unit::new(WorkerId(3), 0));
        assert!(new.step_per_token > f.step_per_token && new.step_per_token < s.step_per_token);
        m.remove_unit(slow);
        assert_eq!(m.rates(slow), new);
    }
}
