//! Small statistics: percentiles (linear interpolation between closest ranks,
//! as numpy's default) and the prefix hit rate.

use serde::{Deserialize, Serialize};

/// Latency distribution of one measure, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub mean: f64,
    pub max: f64,
}

impl Percentiles {
    /// `None` for no samples; NaNs are ignored.
    pub fn of(samples: impl IntoIterator<Item = f64>) -> Option<Percentiles> {
        let mut v: Vec<f64> = samples.into_iter().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(Percentiles {
            p50: percentile(&v, 0.50),
            p90: percentile(&v, 0.90),
            p99: percentile(&v, 0.99),
            mean: v.iter().sum::<f64>() / v.len() as f64,
            max: v[v.len() - 1],
        })
    }
}

/// The `q`-quantile (0..=1) of ascending `sorted` (non-empty), interpolating linearly.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    let rank = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

/// `cached / prompt`, or `None` when no prompt tokens were reported.
pub fn hit_rate(cached: u64, prompt: u64) -> Option<f64> {
    (prompt > 0).then(|| cached as f64 / prompt as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        // numpy.percentile(range(1, 11), [50, 90, 99]) = 5.5, 9.1, 9.91
        let p = Percentiles::of(v).unwrap();
        assert!((p.p50 - 5.5).abs() < 1e-9);
        assert!((p.p90 - 9.1).abs() < 1e-9);
        assert!((p.p99 - 9.91).abs() < 1e-9);
        assert!((p.mean - 5.5).abs() < 1e-9);
        assert_eq!(p.max, 10.0);
    }

    #[test]
    fn percentiles_of_unsorted_single_and_empty() {
        let p = Percentiles::of([3.0, 1.0, 2.0]).unwrap();
        assert_eq!((p.p50, p.max), (2.0, 3.0));
        let one = Percentiles::of([7.0]).unwrap();
        assert_eq!((one.p50, one.p90, one.p99, one.max), (7.0, 7.0, 7.0, 7.0));
        assert_eq!(Percentiles::of([]), None);
        assert_eq!(Percentiles::of([f64::NAN]), None);
    }

    #[test]
    fn percentile_bounds() {
        let v = [1.0, 2.0, 4.0];
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 1.0), 4.0);
        assert_eq!(percentile(&v, 0.75), 3.0);
    }

    #[test]
    fn hit_rate_is_a_token_ratio() {
        assert_eq!(hit_rate(0, 0), None);
        assert_eq!(hit_rate(0, 10), Some(0.0));
        assert_eq!(hit_rate(30, 40), Some(0.75));
    }
}
