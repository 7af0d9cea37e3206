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
}

/// `min * 2^attempt`, capped at `max`, then scaled by a random factor in
/// `[1 - jitter, 1 + jitter]` and capped at `max` again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExponentialBackoff {
    min: Duration,
    max: Duration,
    jitter: f64,
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
        Ok(ExponentialBackoff { min, max, jitter })
    }

    /// A fixed schedule without jitter, for constants: `min <= max` is checked when the
    /// constant is evaluated (a bad pair fails the build, never a running router).
    pub const fn constant(min: Duration, max: Duration) -> Self {
        assert!(min.as_nanos() <= max.as_nanos(), "backoff min above max");
        ExponentialBackoff {
            min,
            max,
            jitter: 0.0,
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
        let base = self
            .min
            .saturating_mul(1u32 << attempt.min(20))
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
