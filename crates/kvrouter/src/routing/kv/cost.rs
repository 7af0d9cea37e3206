//! The KV cost model in time: the seconds that sending one request to one (worker, rank)
//! unit adds to the fleet's total latency, from that unit's learned rates (`timing/`), and the
//! pick among units (lowest cost, ties toward the deeper overlap, then random; optional
//! softmax temperature).
//!
//! ```text
//! ttft     = prefill_base + prefill_per_token * (queued_tokens + new_tokens)
//! stall    = running * prefill_per_token * new_tokens          // its prefill pauses their decode
//! decode   = out * step_secs(active_tokens + request_tokens)   // its own decode at that load
//! slowdown = running * out/2 * step_per_token * request_tokens // its KV read slows their steps
//! cost     = ttft + stall + decode + slowdown
//! ```
//!
//! `out` is the expected output length; the others have on average half of theirs left. The
//! prefix a unit holds shortens `new_tokens` (prefill time and stall); the load terms grow with
//! every request sent to a unit, siblings included (each decodes over its own KV), so a
//! sibling group spills to a cold unit exactly when queueing on the holder costs more time
//! than re-prefilling elsewhere, and a shared system prompt cannot hot-spot (Dynamo #737).

use rand::Rng;

use super::timing::Rates;

/// What one unit looks like to one request, in tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UnitInputs {
    /// Prompt tokens of the request.
    pub request_tokens: f64,
    /// Tokens of it the unit would prefill (neither cached nor in prefill there).
    pub new_tokens: f64,
    /// Other requests' prefill tokens in flight on the unit (ahead of it).
    pub queued_tokens: f64,
    /// Requests in flight on the unit.
    pub running: f64,
    /// Context tokens of the requests in flight on the unit (siblings each count).
    pub active_tokens: f64,
}

/// The terms of one unit's cost, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Cost {
    pub ttft: f64,
    pub stall: f64,
    pub decode: f64,
    pub slowdown: f64,
}

impl Cost {
    /// The total the pick minimises.
    pub fn total(&self) -> f64 {
        self.ttft + self.stall + self.decode + self.slowdown
    }
}

/// The cost of sending a request expected to produce `out` tokens to a unit with rates `r`.
pub fn cost(r: &Rates, out: f64, u: &UnitInputs) -> Cost {
    Cost {
        ttft: r.prefill_secs(u.queued_tokens + u.new_tokens),
        stall: u.running * r.prefill_per_token * u.new_tokens,
        decode: out * r.step_secs(u.active_tokens + u.request_tokens),
        slowdown: u.running * out / 2.0 * r.step_per_token * u.request_tokens,
    }
}

/// Index of the chosen unit among `scored` (`(cost, overlap)` per unit), or None if empty.
/// `temperature == 0`: the lowest cost, ties toward the deeper overlap, then uniformly random.
/// `temperature > 0`: softmax over `-(cost - min) / (max - min) / temperature`.
pub fn pick(scored: &[(f64, u32)], temperature: f64, rng: &mut impl Rng) -> Option<usize> {
    if scored.is_empty() {
        return None;
    }
    let min = scored.iter().map(|s| s.0).fold(f64::INFINITY, f64::min);
    let max = scored.iter().map(|s| s.0).fold(f64::NEG_INFINITY, f64::max);
    if temperature > 0.0 && max > min {
        let span = max - min;
        let weights: Vec<f64> = scored
            .iter()
            .map(|s| (-(s.0 - min) / span / temperature).exp())
            .collect();
        let total: f64 = weights.iter().sum();
        let mut x = rng.random_range(0.0..total);
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return Some(i);
            }
            x -= w;
        }
        return Some(scored.len() - 1);
    }
    // Costs within a microsecond are ties.
    const EPS: f64 = 1e-6;
    let best_overlap = scored
        .iter()
        .filter(|s| s.0 <= min + EPS)
        .map(|s| s.1)
        .max()?;
    // Reservoir-sample uniformly among the units tied on both keys.
    let mut chosen = None;
    let mut seen = 0u32;
    for (i, s) in scored.iter().enumerate() {
        if s.0 <= min + EPS && s.1 == best_overlap {
            seen += 1;
            if rng.random_range(0..seen) == 0 {
                chosen = Some(i);
            }
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GPU-like unit: 60 us per prefill token, 8 ms + 0.05 us per active token per step.
    const R: Rates = Rates {
        prefill_base: 0.02,
        prefill_per_token: 60e-6,
        step_base: 0.008,
        step_per_token: 0.05e-6,
    };

    /// A `len`-token request with `cached` tokens there, next to `running` others of `ctx`.
    fn unit(len: f64, cached: f64, running: f64, ctx: f64) -> UnitInputs {
        UnitInputs {
            request_tokens: len,
            new_tokens: len - cached,
            queued_tokens: 0.0,
            running,
            active_tokens: running * ctx,
        }
    }

    fn total(out: f64, u: UnitInputs) -> f64 {
        cost(&R, out, &u).total()
    }

    #[test]
    fn terms() {
        let u = UnitInputs {
            request_tokens: 1000.0,
            new_tokens: 600.0,
            queued_tokens: 400.0,
            running: 2.0,
            active_tokens: 3000.0,
        };
        let c = cost(&R, 10.0, &u);
        assert!((c.ttft - (0.02 + 0.06)).abs() < 1e-12);
        assert!((c.stall - 2.0 * 600.0 * 60e-6).abs() < 1e-12);
        assert!((c.decode - 10.0 * (0.008 + 4000.0 * 0.05e-6)).abs() < 1e-12);
        assert!((c.slowdown - 2.0 * 5.0 * 0.05e-6 * 1000.0).abs() < 1e-12);
    }

    #[test]
    fn a_sibling_joins_its_group_while_a_reprefill_costs_more_than_the_queue() {
        // Short outputs: the 5k-token prefill dominates, the group stays together.
        let holder = unit(5120.0, 5120.0, 3.0, 5120.0);
        let cold = unit(5120.0, 0.0, 0.0, 0.0);
        assert!(total(8.0, holder) < total(8.0, cold));
        // Equally loaded elsewhere, re-prefilling would also stall the decodes there.
        let other = unit(5120.0, 0.0, 2.0, 5120.0);
        assert!(total(256.0, unit(5120.0, 5120.0, 2.0, 5120.0)) < total(256.0, other));
    }

    #[test]
    fn a_sibling_group_spills_when_queueing_on_the_holder_costs_more_than_a_reprefill() {
        // 256 output tokens: 15 siblings decoding on the holder slow every step more than one
        // 5k-token prefill elsewhere costs, so the batch's tail does not grow there.
        let holder = unit(5120.0, 5120.0, 15.0, 5120.0);
        let cold = unit(5120.0, 0.0, 0.0, 0.0);
        assert!(total(256.0, holder) > total(256.0, cold));
        // With only one sibling there, joining it is still cheaper.
        let holder1 = unit(5120.0, 5120.0, 1.0, 5120.0);
        assert!(total(256.0, holder1) < total(256.0, cold));
    }

    #[test]
    fn a_long_cached_context_beats_an_idle_unit_but_a_shared_prefix_does_not_hot_spot() {
        // A session's 30k-token context cached on a unit with 4 others beats re-prefilling it.
        let home = unit(32_000.0, 30_000.0, 4.0, 8000.0);
        let away = unit(32_000.0, 0.0, 0.0, 0.0);
        assert!(total(64.0, home) < total(64.0, away));
        // A 256-token system prefix is worth less than a busy unit's load.
        let busy = unit(2048.0, 256.0, 8.0, 2048.0);
        let idle = unit(2048.0, 0.0, 0.0, 0.0);
        assert!(total(64.0, busy) > total(64.0, idle));
        assert!(total(64.0, unit(2048.0, 256.0, 0.0, 0.0)) < total(64.0, idle));
    }

    #[test]
    fn queued_prefill_delays_the_first_token() {
        let mut q = unit(1000.0, 0.0, 0.0, 0.0);
        let free = q;
        q.queued_tokens = 50_000.0;
        assert!(cost(&R, 1.0, &q).ttft > cost(&R, 1.0, &free).ttft + 0.7);
    }

    #[test]
    fn pick_lowest_then_deeper_overlap_then_random() {
        let mut rng = rand::rng();
        assert_eq!(
            pick(&[(3.0, 0), (1.0, 0), (2.0, 9)], 0.0, &mut rng),
            Some(1)
        );
        assert_eq!(
            pick(&[(1.0, 0), (1.0, 5), (2.0, 9)], 0.0, &mut rng),
            Some(1)
        );
        let mut hits = [0u32; 2];
        for _ in 0..400 {
            hits[pick(&[(1.0, 3), (1.0, 3)], 0.0, &mut rng).unwrap()] += 1;
        }
        assert!(hits[0] > 100 && hits[1] > 100, "{hits:?}");
        assert_eq!(pick(&[], 0.0, &mut rng), None);
    }

    #[test]
    fn temperature_spreads_but_prefers_cheap() {
        let mut rng = rand::rng();
        let mut hits = [0u32; 2];
        for _ in 0..2000 {
            hits[pick(&[(0.0, 0), (10.0, 0)], 1.0, &mut rng).unwrap()] += 1;
        }
        assert!(hits[1] > 0 && hits[0] > hits[1] * 2, "{hits:?}");
    }
}
