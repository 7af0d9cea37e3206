//! A warning that may be logged at most once per interval, counting what it held back, so a
//! limit tripping thousands of times a second leaves one line every few seconds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

pub struct WarnGate {
    every: Duration,
    last: Mutex<Option<Instant>>,
    held: AtomicU64,
}

impl WarnGate {
    pub fn new(every: Duration) -> WarnGate {
        WarnGate {
            every,
            last: Mutex::new(None),
            held: AtomicU64::new(0),
        }
    }

    /// `Some(occurrences since the last warning, this one included)` when a warning may be
    /// logged now; `None` (counted) otherwise.
    pub fn check(&self) -> Option<u64> {
        let now = Instant::now();
        let mut last = self.last.lock();
        let held = self.held.fetch_add(1, Ordering::Relaxed) + 1;
        if last.is_some_and(|t| now.duration_since(t) < self.every) {
            return None;
        }
        *last = Some(now);
        self.held.store(0, Ordering::Relaxed);
        Some(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_warning_per_interval_with_the_count_held_back() {
        let g = WarnGate::new(Duration::from_secs(10));
        assert_eq!(g.check(), Some(1));
        assert_eq!(g.check(), None);
        assert_eq!(g.check(), None);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(g.check(), Some(3));
        assert_eq!(g.check(), None);
    }
}
