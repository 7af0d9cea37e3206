//! Retry schedule for failures before the first response byte: exponential backoff with jitter.

use std::time::Duration;

use rand::Rng;

/// Backoff parameters.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Backoff {
    /// Delay before retry number `retry` (0-based): `initial * 2^retry`, capped, ±20% jitter.
    pub fn delay(&self, retry: u32) -> Duration {
        let base = self
            .initial
            .saturating_mul(1u32 << retry.min(20))
            .min(self.max);
        let jitter = rand::rng().random_range(0.8..=1.2);
        base.mul_f64(jitter).min(self.max)
    }
}

/// True for worker statuses that mean "not serving right now": retried on another worker.
pub fn is_retryable_status(status: http::StatusCode) -> bool {
    matches!(status.as_u16(), 502 | 503)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_caps() {
        let b = Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(35),
        };
        assert!(b.delay(0) <= Duration::from_millis(12));
        assert!(b.delay(0) >= Duration::from_millis(8));
        assert!(b.delay(1) >= Duration::from_millis(16));
        assert!(b.delay(10) >= Duration::from_millis(28));
        assert!(b.delay(30) <= Duration::from_millis(35));
    }
}
