//! Seeded random draws of the workloads: one independent stream per (seed, purpose,
//! id), and the distributions drawn from it (uniform lengths, capped lognormal output
//! lengths, Zipf tenant popularity, exponential gaps and think times), all from
//! `rand_distr`. The same seed gives the same draws for a given loadgen build.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, LogNormal, Zipf};

/// What a random stream is for; streams of different purposes never coincide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// A rollout prompt group's prompt length and its samples' output lengths.
    RolloutGroup = 1,
    /// A tenant's system-prompt length.
    TenantLen = 2,
    /// The tenants workload's arrival gaps.
    Arrivals = 3,
    /// The tenants workload's tenant picks.
    TenantPick = 4,
    /// One agent session's think times.
    Think = 5,
}

/// The random stream of `purpose` number `id` under `seed`.
pub fn rng(seed: u64, purpose: Stream, id: u64) -> StdRng {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&(purpose as u64).to_le_bytes());
    key[8..].copy_from_slice(&id.to_le_bytes());
    StdRng::seed_from_u64(xxhash_rust::xxh3::xxh3_64_with_seed(&key, seed))
}

/// A length drawn uniformly from `min..=max` (`min > max` gives `min`).
pub fn uniform_len(rng: &mut impl Rng, min: u32, max: u32) -> u32 {
    if max <= min {
        min
    } else {
        rng.random_range(min..=max)
    }
}

/// Output lengths: lognormal with the given median and sigma (of the log), rounded,
/// at least 1 and at most `cap` (long-tailed like RL rollouts, cut at max_new_tokens).
#[derive(Clone, Copy, Debug)]
pub struct OutputLen {
    dist: LogNormal<f64>,
    cap: u32,
}

impl OutputLen {
    /// `None` unless `median` > 0, `sigma` finite and >= 0, and `cap` > 0.
    pub fn new(median: f64, sigma: f64, cap: u32) -> Option<OutputLen> {
        let sigma_ok = sigma.is_finite() && sigma >= 0.0;
        if !(median > 0.0 && median.is_finite() && sigma_ok) || cap == 0 {
            return None;
        }
        let dist = LogNormal::new(median.ln(), sigma).ok()?;
        Some(OutputLen { dist, cap })
    }

    pub fn sample(&self, rng: &mut impl Rng) -> u32 {
        let x = self.dist.sample(rng).round();
        // `as` saturates (and maps NaN to 0); the clamp then keeps 1..=cap.
        (x as u32).clamp(1, self.cap)
    }
}

/// Picks one of `n` items with Zipf popularity (exponent `s`): item 0 is the most popular.
#[derive(Clone, Copy, Debug)]
pub struct ZipfPick {
    dist: Zipf<f64>,
    n: u32,
}

impl ZipfPick {
    /// `None` unless `n` > 0 and `s` finite and >= 0 (`s` = 0 is uniform).
    pub fn new(n: u32, s: f64) -> Option<ZipfPick> {
        if n == 0 || !s.is_finite() {
            return None;
        }
        let dist = Zipf::new(f64::from(n), s).ok()?;
        Some(ZipfPick { dist, n })
    }

    /// An index in `0..n`.
    pub fn sample(&self, rng: &mut impl Rng) -> u32 {
        let rank = self.dist.sample(rng) as u32; // 1..=n
        rank.clamp(1, self.n) - 1
    }
}

/// Exponential waits of a given mean (Poisson arrivals' gaps, think times); a zero
/// mean always waits zero.
#[derive(Clone, Copy, Debug)]
pub struct ExpWait {
    dist: Option<Exp<f64>>,
}

impl ExpWait {
    /// `None` unless `mean_secs` is finite and >= 0.
    pub fn new(mean_secs: f64) -> Option<ExpWait> {
        if !(mean_secs.is_finite() && mean_secs >= 0.0) {
            return None;
        }
        if mean_secs == 0.0 {
            return Some(ExpWait { dist: None });
        }
        Some(ExpWait {
            dist: Some(Exp::new(1.0 / mean_secs).ok()?),
        })
    }

    pub fn sample(&self, rng: &mut impl Rng) -> Duration {
        match &self.dist {
            None => Duration::ZERO,
            Some(d) => Duration::try_from_secs_f64(d.sample(rng)).unwrap_or(Duration::ZERO),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_deterministic_and_independent() {
        let draw = |seed, purpose, id| rng(seed, purpose, id).random::<u64>();
        assert_eq!(draw(1, Stream::Think, 3), draw(1, Stream::Think, 3));
        assert_ne!(draw(1, Stream::Think, 3), draw(2, Stream::Think, 3));
        assert_ne!(draw(1, Stream::Think, 3), draw(1, Stream::Think, 4));
        assert_ne!(draw(1, Stream::Think, 3), draw(1, Stream::Arrivals, 3));
    }

    #[test]
    fn uniform_lengths_stay_in_bounds_and_reach_both_ends() {
        let mut r = rng(0, Stream::RolloutGroup, 0);
        let v: Vec<u32> = (0..2000).map(|_| uniform_len(&mut r, 10, 20)).collect();
        assert!(v.iter().all(|&x| (10..=20).contains(&x)));
        assert!(v.contains(&10) && v.contains(&20));
        assert_eq!(uniform_len(&mut r, 7, 7), 7);
        assert_eq!(uniform_len(&mut r, 9, 3), 9);
    }

    #[test]
    fn output_lengths_have_the_median_and_a_capped_tail() {
        let d = OutputLen::new(400.0, 1.0, 4096).unwrap();
        let mut r = rng(5, Stream::RolloutGroup, 1);
        let mut v: Vec<u32> = (0..20_000).map(|_| d.sample(&mut r)).collect();
        v.sort_unstable();
        let median = v[v.len() / 2];
        assert!((360..=440).contains(&median), "median {median}");
        assert!(v[0] >= 1);
        assert_eq!(*v.last().unwrap(), 4096, "sigma 1 reaches 10x the median");
        // P(X > 4096) = P(Z > ln(10.24)) ~ 1%: the cap holds those.
        let capped = v.iter().filter(|&&x| x == 4096).count();
        assert!((100..=350).contains(&capped), "{capped} capped");
        let tiny_cap = OutputLen::new(400.0, 1.0, 8).unwrap();
        assert!((0..100).all(|_| (1..=8).contains(&tiny_cap.sample(&mut r))));
        let fixed = OutputLen::new(64.0, 0.0, 4096).unwrap();
        assert!((0..100).all(|_| fixed.sample(&mut r) == 64));
        assert!(OutputLen::new(0.0, 1.0, 10).is_none());
        assert!(OutputLen::new(10.0, -1.0, 10).is_none());
        assert!(OutputLen::new(10.0, 1.0, 0).is_none());
    }

    #[test]
    fn zipf_picks_favour_the_first_items() {
        let z = ZipfPick::new(128, 1.0).unwrap();
        let mut r = rng(3, Stream::TenantPick, 0);
        let mut counts = vec![0u32; 128];
        for _ in 0..50_000 {
            counts[z.sample(&mut r) as usize] += 1;
        }
        // Zipf s=1: item k has weight 1/(k+1); item 0 ~ 2x item 1 ~ 10x item 9.
        let ratio = f64::from(counts[0]) / f64::from(counts[9]);
        assert!((7.0..13.0).contains(&ratio), "ratio {ratio}");
        assert!(counts[0] > counts[1] && counts[1] > counts[3]);
        assert!(counts[127] > 0);
        let one = ZipfPick::new(1, 1.0).unwrap();
        assert_eq!(one.sample(&mut r), 0);
        let uniform = ZipfPick::new(4, 0.0).unwrap();
        assert!((0..1000).all(|_| uniform.sample(&mut r) < 4));
        assert!(ZipfPick::new(0, 1.0).is_none());
        assert!(ZipfPick::new(4, f64::NAN).is_none());
    }

    #[test]
    fn exponential_waits_have_the_mean() {
        let w = ExpWait::new(0.05).unwrap();
        let mut r = rng(1, Stream::Arrivals, 0);
        let n = 20_000;
        let total: f64 = (0..n).map(|_| w.sample(&mut r).as_secs_f64()).sum();
        let mean = total / f64::from(n);
        assert!((0.045..0.055).contains(&mean), "mean {mean}");
        let zero = ExpWait::new(0.0).unwrap();
        assert_eq!(zero.sample(&mut r), Duration::ZERO);
        assert!(ExpWait::new(-1.0).is_none());
        assert!(ExpWait::new(f64::INFINITY).is_none());
    }
}
