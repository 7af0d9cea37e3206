//! `ExponentialBackoff`: the one validated backoff schedule of the crate (data-plane retries,
//! ZMQ resubscribes, worker start-up probes), and `BackoffState`, a cursor through it.

use std::time::Duration;

use rand::Rng;

/// Why a backoff could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidBackoff {
    #[error("backoff minimum {min:?} is larger than its maximum {max:?}")]
    MinAboveMax { min: Duration, max: Duration },
    #[error("backoff jitter {0} is not in [0, 1]")]
    Jitter(f64),
    #[error("backoff multiplier {0} is not a number of at least 1")]
    Multiplier(f64),
}

/// `min * multiplier^attempt` (x2 unless [`ExponentialBackoff::with_multiplier`] says
/// otherwise), capped at `max`, then scaled by a random factor in `[1 - jitter, 1 + jitter]`
/// and capped at `max` again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExponentialBackoff {
    min: Duration,
    max: Duration,
    jitter: f64,
    multiplier: f64,
}

impl ExponentialBackoff {
    /// Validates `min <= max` and `jitter` in `[0, 1]`.
    pub fn new(min: Duration, max: Duration, jitter: f64) -> Result<Self, InvalidBackoff> {
        if min > max {
            return Err(InvalidBackoff::MinAboveMax { min, max });
        }
        if !(0.0..=1.0).contains(&jitter) {
            return Err(InvalidBackoff::Jitter(jitter));
        }
        Ok(ExponentialBackoff {
            min,
            max,
            jitter,
            multiplier: 2.0,
        })
    }

    /// The same schedule growing by `multiplier` per attempt (sgl-router's
    /// `--retry-backoff-multiplier`); validated finite and at least 1.
    pub fn with_multiplier(self, multiplier: f64) -> Result<Self, InvalidBackoff> {
        if !(multiplier.is_finite() && multiplier >= 1.0) {
            return Err(InvalidBackoff::Multiplier(multiplier));
        }
        Ok(ExponentialBackoff { multiplier, ..self })
    }

    /// A fixed schedule without jitter, for constants: `min <= max` is checked when the
    /// constant is evaluated (a bad pair fails the build, never a running router).
    pub const fn constant(min: Duration, max: Duration) -> Self {
        assert!(min.as_nanos() <= max.as_nanos(), "backoff min above max");
        ExponentialBackoff {
            min,
            max,
            jitter: 0.0,
            multiplier: 2.0,
        }
    }

    /// The first delay (before jitter).
    pub fn min(&self) -> Duration {
        self.min
    }

    /// The largest delay.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// Delay after failure number `attempt` (0-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let base = if self.multiplier == 2.0 {
            self.min.saturating_mul(1u32 << attempt.min(20))
        } else {
            // Capped exponent: 1.0^n stays 1, and any multiplier > 1 passes `max` long before.
            let factor = self.multiplier.powi(attempt.min(64) as i32);
            Duration::try_from_secs_f64(self.min.as_secs_f64() * factor).unwrap_or(self.max)
        }
        .min(self.max);
        if self.jitter == 0.0 {
            return base;
        }
        let factor = rand::rng().random_range((1.0 - self.jitter)..=(1.0 + self.jitter));
        base.mul_f64(factor).min(self.max)
    }

    /// A cursor starting at the first delay.
    pub fn start(&self) -> BackoffState {
        BackoffState {
            backoff: *self,
            attempt: 0,
        }
    }
}

/// Where a retrying loop is in its [`ExponentialBackoff`].
#[derive(Debug, Clone)]
pub struct BackoffState {
    backoff: ExponentialBackoff,
    attempt: u32,
}

impl BackoffState {
    /// The delay to wait now, without moving on.
    pub fn current(&self) -> Duration {
        self.backoff.delay(self.attempt)
    }

    /// The delay to wait now; the next call returns the following (longer) one.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.current();
        self.attempt = self.attempt.saturating_add(1);
        d
    }

    /// Back to the first delay (after a success).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn validates() {
        assert!(matches!(
            ExponentialBackoff::new(ms(2), ms(1), 0.0),
            Err(InvalidBackoff::MinAboveMax { .. })
        ));
        assert_eq!(
            ExponentialBackoff::new(ms(1), ms(2), 1.5),
            Err(InvalidBackoff::Jitter(1.5))
        );
        assert!(ExponentialBackoff::new(ms(1), ms(2), f64::NAN).is_err());
        assert!(ExponentialBackoff::new(ms(1), ms(1), 1.0).is_ok());
    }

    #[test]
    fn grows_and_caps_with_jitter() {
        let b = ExponentialBackoff::new(ms(10), ms(35), 0.2).expect("valid");
        for _ in 0..50 {
            assert!(b.delay(0) <= ms(12) && b.delay(0) >= ms(8));
            assert!(b.delay(1) >= ms(16));
            assert!(b.delay(10) >= ms(28));
            assert!(b.delay(30) <= ms(35));
        }
    }

    #[test]
    fn multiplier_grows_by_its_factor() {
        let b = ExponentialBackoff::new(ms(100), ms(30_000), 0.0)
            .and_then(|b| b.with_multiplier(1.5))
            .expect("valid");
        let want = [100_000, 150_000, 225_000, 337_500];
        for (n, micros) in want.into_iter().enumerate() {
            let got = b.delay(n as u32).as_secs_f64() * 1e6;
            assert!((got - micros as f64).abs() < 1.0, "delay({n}) = {got} us");
        }
        assert_eq!(b.delay(1000), ms(30_000));
        let flat = b.with_multiplier(1.0).expect("valid");
        assert_eq!(flat.delay(50), ms(100));
        for bad in [0.5, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                b.with_multiplier(bad),
                Err(InvalidBackoff::Multiplier(_))
            ));
        }
    }

    #[test]
    fn cursor_doubles_caps_and_resets() {
        const B: ExponentialBackoff =
            ExponentialBackoff::constant(Duration::from_millis(100), Duration::from_millis(500));
        assert_eq!(Ok(B), ExponentialBackoff::new(ms(100), ms(500), 0.0));
        let mut s = B.start();
        let seen: Vec<Duration> = (0..5).map(|_| s.next_delay()).collect();
        assert_eq!(seen, vec![ms(100), ms(200), ms(400), ms(500), ms(500)]);
        s.reset();
        assert_eq!(s.current(), ms(100));
        assert_eq!(s.next_delay(), ms(100));
        assert_eq!(s.current(), ms(200));
    }
}
