//! Simulated step durations (the Dynamo mocker's polynomial model, configurable):
//! prefill `ms = a*t^2 + b*t + c` with `t` the uncached tokens of the batch, decode
//! `ms = max(1, a*u^2 + b*u + c)` with `u` the KV utilisation of the running batch.

/// Step-cost model of one rank.
#[derive(Debug, Clone, Copy)]
pub struct TimingModel {
    pub prefill: [f64; 3],
    pub decode: [f64; 3],
}

impl Default for TimingModel {
    fn default() -> Self {
        TimingModel {
            prefill: [4.209989e-7, 1.518344e-2, 16.50142],
            decode: [-25.74, 54.01, 5.74],
        }
    }
}

impl TimingModel {
    /// Milliseconds of a prefill batch computing `uncached_tokens` tokens.
    pub fn prefill_ms(&self, uncached_tokens: usize) -> f64 {
        let t = uncached_tokens as f64;
        let [a, b, c] = self.prefill;
        (a * t * t + b * t + c).max(0.0)
    }

    /// Milliseconds of one decode step at KV utilisation `u` in `[0, 1]`.
    pub fn decode_ms(&self, u: f64) -> f64 {
        let u = u.clamp(0.0, 1.0);
        let [a, b, c] = self.decode;
        (a * u * u + b * u + c).max(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_curve_values() {
        let m = TimingModel::default();
        assert!((m.decode_ms(0.0) - 5.74).abs() < 1e-9);
        assert!((m.decode_ms(1.0) - 34.01).abs() < 1e-9);
        assert!(m.prefill_ms(1000) > m.prefill_ms(100));
        assert!((m.prefill_ms(0) - 16.50142).abs() < 1e-9);
    }
}
