//! Simulated step durations. Two models, chosen with `--timing-model`:
//!
//! - `poly` (default): the Dynamo mocker's polynomials. Prefill `ms = a*t^2 + b*t + c` with `t`
//!   the uncached tokens of the batch; decode `ms = max(1, a*u^2 + b*u + c)` with `u` the KV
//!   utilisation of the running batch (so decode time depends on utilisation only).
//! - `roofline`: memory-bound decode and compute-bound prefill. Decode
//!   `ms = base + per_req * batch + per_token * context_tokens` (weights read once per step,
//!   per-request compute, every running request's KV read once); prefill
//!   `ms = base + per_token * new + attn * sum(new_i * (prefix_i + new_i / 2))` (linear layers
//!   per new token, causal attention per (query, key) pair).
//!
//! See docs/mock.md ("Timing models") for where the default numbers come from.

/// One request's part of a prefill forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefillPart {
    /// Tokens already in KV (cached prefix plus earlier chunks).
    pub prefix: usize,
    /// Tokens computed in this pass.
    pub new: usize,
}

/// Roofline parameters (milliseconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Roofline {
    /// Decode: fixed cost per step (weights read once), per running request, per context token.
    pub decode: [f64; 3],
    /// Prefill: fixed cost per pass, per new token, per attended (query, key) pair.
    pub prefill: [f64; 3],
}

/// Roofline defaults for an 8B dense model (Llama-3-8B shape) in BF16 on one H100 SXM.
pub const ROOFLINE_DECODE_DEFAULT: [f64; 3] = [6.0, 0.04, 4.4e-5];
/// See [`ROOFLINE_DECODE_DEFAULT`].
pub const ROOFLINE_PREFILL_DEFAULT: [f64; 3] = [8.0, 0.023, 1.3e-6];
/// Dynamo mocker's prefill polynomial.
pub const POLY_PREFILL_DEFAULT: [f64; 3] = [4.209989e-7, 1.518344e-2, 16.50142];
/// Dynamo mocker's decode polynomial.
pub const POLY_DECODE_DEFAULT: [f64; 3] = [-25.74, 54.01, 5.74];

impl Default for Roofline {
    fn default() -> Self {
        Roofline {
            decode: ROOFLINE_DECODE_DEFAULT,
            prefill: ROOFLINE_PREFILL_DEFAULT,
        }
    }
}

/// Step-cost model of one rank.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TimingModel {
    Poly { prefill: [f64; 3], decode: [f64; 3] },
    Roofline(Roofline),
}

impl Default for TimingModel {
    fn default() -> Self {
        TimingModel::Poly {
            prefill: POLY_PREFILL_DEFAULT,
            decode: POLY_DECODE_DEFAULT,
        }
    }
}

impl TimingModel {
    /// Milliseconds of a prefill pass computing `parts`.
    pub fn prefill_ms(&self, parts: &[PrefillPart]) -> f64 {
        let new: usize = parts.iter().map(|p| p.new).sum();
        match self {
            TimingModel::Poly { prefill, .. } => {
                let t = new as f64;
                let [a, b, c] = *prefill;
                (a * t * t + b * t + c).max(0.0)
            }
            TimingModel::Roofline(r) => {
                let [base, per_token, attn] = r.prefill;
                let pairs: f64 = parts
                    .iter()
                    .map(|p| p.new as f64 * (p.prefix as f64 + p.new as f64 / 2.0))
                    .sum();
                (base + per_token * new as f64 + attn * pairs).max(0.0)
            }
        }
    }

    /// Milliseconds of one decode step of `batch` requests holding `context_tokens` tokens
    /// of KV in total, at KV utilisation `utilisation` in `[0, 1]`.
    pub fn decode_ms(&self, batch: usize, context_tokens: usize, utilisation: f64) -> f64 {
        match self {
            TimingModel::Poly { decode, .. } => {
                let u = utilisation.clamp(0.0, 1.0);
                let [a, b, c] = *decode;
                (a * u * u + b * u + c).max(1.0)
            }
            TimingModel::Roofline(r) => {
                let [base, per_req, per_token] = r.decode;
                (base + per_req * batch as f64 + per_token * context_tokens as f64).max(0.0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(prefix: usize, new: usize) -> [PrefillPart; 1] {
        [PrefillPart { prefix, new }]
    }

    #[test]
    fn poly_published_curve_values() {
        let m = TimingModel::default();
        assert!((m.decode_ms(1, 0, 0.0) - 5.74).abs() < 1e-9);
        assert!((m.decode_ms(1, 0, 1.0) - 34.01).abs() < 1e-9);
        assert!(m.prefill_ms(&one(0, 1000)) > m.prefill_ms(&one(0, 100)));
        assert!((m.prefill_ms(&[]) - 16.50142).abs() < 1e-9);
        // poly ignores batch size and context at equal utilisation
        assert_eq!(m.decode_ms(1, 10, 0.5), m.decode_ms(128, 10_000, 0.5));
    }

    #[test]
    fn roofline_grows_with_batch_and_context() {
        let m = TimingModel::Roofline(Roofline::default());
        let base = m.decode_ms(1, 1024, 0.0);
        assert!(m.decode_ms(32, 1024, 0.0) > base, "batch size costs");
        assert!(m.decode_ms(1, 8192, 0.0) > base, "context costs");
        assert!(
            (m.decode_ms(0, 0, 0.9) - 6.0).abs() < 1e-9,
            "utilisation alone does not"
        );
        // a cached prefix makes prefill cheaper than computing it, but not free
        let cold = m.prefill_ms(&one(0, 8192));
        let warm = m.prefill_ms(&one(8000, 192));
        assert!(warm < cold / 10.0, "{warm} vs {cold}");
        assert!(
            warm > m.prefill_ms(&one(0, 192)),
            "attention over the prefix costs"
        );
    }
}
