//! A robust recursive least-squares fit of a small linear model `y ~ theta . x`, with
//! exponential forgetting, a bounded covariance and clipped residuals: the online estimator
//! behind the learned prefill and decode rates (`rates.rs`). Constant memory: `N` parameters
//! and an `N x N` covariance.
//!
//! - Forgetting (`lambda < 1`) lets the fit follow a unit whose speed changes; the covariance
//!   of directions no sample excites would grow without bound under forgetting, so each
//!   variance is capped at the prior's (the fit then stays near its prior in those directions).
//! - Samples are weighed by their size (relative errors: timing noise is multiplicative), and
//!   relative residuals beyond `CLIP` times their running mean are clipped (Huber): one
//!   stalled request (a network hiccup, a retraction) moves the fit by a bounded step.

/// One fit of `N` parameters (see module docs).
#[derive(Debug, Clone)]
pub struct Rls<const N: usize> {
    theta: [f64; N],
    p: [[f64; N]; N],
    /// The prior variances (bounds of the diagonal).
    p0: [f64; N],
    lambda: f64,
    /// Running mean absolute residual (the clip scale), `None` until the first sample.
    scale: Option<f64>,
    samples: u64,
}

/// Residuals beyond this many running mean absolute residuals are clipped.
const CLIP: f64 = 3.0;
/// Samples smaller than this are weighed as if this large (same unit as `y`).
const MIN_SIZE: f64 = 1e-3;
/// Weight of a new residual in the running mean absolute residual.
const SCALE_ALPHA: f64 = 0.05;

impl<const N: usize> Rls<N> {
    /// A fit starting at `theta` with prior standard deviations `std` (per parameter, in the
    /// parameter's unit, relative to a unit residual) and forgetting factor `lambda`.
    pub fn new(theta: [f64; N], std: [f64; N], lambda: f64) -> Self {
        let mut p = [[0.0; N]; N];
        for i in 0..N {
            p[i][i] = std[i] * std[i];
        }
        let p0 = std::array::from_fn(|i| p[i][i]);
        Rls {
            theta,
            p,
            p0,
            lambda,
            scale: None,
            samples: 0,
        }
    }

    /// The current parameters.
    pub fn theta(&self) -> [f64; N] {
        self.theta
    }

    /// Samples absorbed so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The model's prediction for `x`.
    pub fn predict(&self, x: &[f64; N]) -> f64 {
        dot(&self.theta, x)
    }

    /// Absorbs one observation `y` at features `x` (non-finite input is ignored).
    pub fn update(&mut self, x: &[f64; N], y: f64) {
        if !y.is_finite() || x.iter().any(|v| !v.is_finite()) {
            return;
        }
        // Timing noise is multiplicative: weigh each sample by its size, so a 20 ms TTFT and
        // a 20 s decode count alike and share one residual scale.
        let size = self.predict(x).abs().max(y.abs()).max(MIN_SIZE);
        let x: [f64; N] = std::array::from_fn(|i| x[i] / size);
        let x = &x;
        let y = y / size;
        let mut px = [0.0; N];
        for (i, row) in self.p.iter().enumerate() {
            px[i] = dot(row, x);
        }
        let denom = self.lambda + dot(x, &px);
        if denom <= 0.0 || !denom.is_finite() {
            return;
        }
        let mut err = y - self.predict(x);
        if let Some(s) = self.scale {
            let lim = CLIP * s.max(1e-9);
            err = err.clamp(-lim, lim);
        }
        let abs = err.abs();
        self.scale = Some(match self.scale {
            None => abs,
            Some(s) => s + SCALE_ALPHA * (abs - s),
        });
        let k: [f64; N] = std::array::from_fn(|i| px[i] / denom);
        for (t, ki) in self.theta.iter_mut().zip(k) {
            *t += ki * err;
        }
        // P = (P - k (P x)^T) / lambda  (P symmetric, so x^T P = (P x)^T)
        for (row, ki) in self.p.iter_mut().zip(k) {
            for (v, pxj) in row.iter_mut().zip(px) {
                *v = (*v - ki * pxj) / self.lambda;
            }
        }
        // Bound each variance by its prior's: P <- D P D with D_ii = sqrt(min(1, P0_ii / P_ii))
        // keeps P symmetric positive definite and touches only the unexcited directions.
        let d: [f64; N] = std::array::from_fn(|i| {
            let v = self.p[i][i];
            if v > self.p0[i] {
                (self.p0[i] / v).sqrt()
            } else {
                1.0
            }
        });
        for (row, di) in self.p.iter_mut().zip(d) {
            for (v, dj) in row.iter_mut().zip(d) {
                *v *= di * dj;
            }
        }
        self.samples += 1;
    }
}

fn dot<const N: usize>(a: &[f64; N], b: &[f64; N]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn converges_to_a_noisy_linear_model_and_shrugs_off_outliers() {
        let truth = [0.02, 0.3, 1.5];
        let mut fit = Rls::new([0.1, 0.1, 0.1], [3.0, 3.0, 3.0], 0.995);
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for i in 0..3000 {
            let x = [1.0, rng.random_range(0.0..4.0), rng.random_range(0.0..2.0)];
            let mut y = dot(&truth, &x) + rng.random_range(-0.01..0.01);
            if i % 50 == 0 {
                y += 30.0; // a stalled request
            }
            fit.update(&x, y);
        }
        for (got, want) in fit.theta().iter().zip(truth) {
            assert!((got - want).abs() < 0.03, "{:?} vs {truth:?}", fit.theta());
        }
        assert_eq!(fit.samples(), 3000);
    }

    #[test]
    fn an_unexcited_parameter_stays_at_its_prior_and_the_fit_tracks_change() {
        let mut fit = Rls::new([0.0, 7.0], [1.0, 1.0], 0.98);
        for _ in 0..2000 {
            fit.update(&[1.0, 0.0], 2.0);
        }
        assert!((fit.theta()[0] - 2.0).abs() < 1e-6, "{:?}", fit.theta());
        assert!((fit.theta()[1] - 7.0).abs() < 1e-9, "{:?}", fit.theta());
        for _ in 0..500 {
            fit.update(&[1.0, 0.0], 4.0);
        }
        assert!((fit.theta()[0] - 4.0).abs() < 0.05, "{:?}", fit.theta());
        fit.update(&[f64::NAN, 0.0], 1.0);
        assert_eq!(fit.samples(), 2500);
    }
}
