//! The minimum rate of a request body upload, Apache `mod_reqtimeout`'s `body=..,MinRate=500`
//! form over a sliding window: every [`WINDOW`] of an upload must bring at least
//! [`MIN_RATE`] x [`WINDOW`] bytes. The idle timeout between frames (`--body-read-timeout-secs`)
//! does not catch a client that sends one byte every 20 s, nor one that sent megabytes at once
//! and then trickles (its average rate stays high for hours); the window catches both within
//! `WINDOW` plus one idle timeout, so a crowd of trickling uploads cannot hold the body budget.

use std::time::Duration;

use tokio::time::Instant;

/// Bytes per second an upload must keep up, window by window.
pub(super) const MIN_RATE: usize = 500;
/// The window the rate is measured over.
pub(super) const WINDOW: Duration = Duration::from_secs(10);

/// One upload's current window.
pub(super) struct UploadRate {
    start: Instant,
    bytes: usize,
}

impl Default for UploadRate {
    fn default() -> Self {
        UploadRate {
            start: Instant::now(),
            bytes: 0,
        }
    }
}

impl UploadRate {
    /// Counts `n` bytes that arrived now; false when the window that just closed brought less
    /// than the minimum (the upload is too slow).
    pub(super) fn on_data(&mut self, n: usize) -> bool {
        let now = Instant::now();
        let elapsed = now.duration_since(self.start);
        if elapsed < WINDOW {
            self.bytes = self.bytes.saturating_add(n);
            return true;
        }
        let needed = (MIN_RATE as f64 * elapsed.as_secs_f64()) as usize;
        let kept_up = self.bytes.saturating_add(n) >= needed;
        self.start = now;
        self.bytes = 0;
        kept_up
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_trickle_fails_the_first_window_it_closes() {
        let mut r = UploadRate::default();
        assert!(r.on_data(1));
        tokio::time::advance(Duration::from_secs(20)).await;
        assert!(!r.on_data(1), "2 bytes in 20 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_then_a_trickle_fails_once_a_window_goes_by_without_data() {
        let mut r = UploadRate::default();
        assert!(r.on_data(16 << 20));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(r.on_data(1), "the first window held the burst");
        tokio::time::advance(Duration::from_secs(15)).await;
        assert!(!r.on_data(1), "then 1 byte in 15 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_upload_keeps_up() {
        let mut r = UploadRate::default();
        for _ in 0..100 {
            tokio::time::advance(Duration::from_secs(1)).await;
            assert!(r.on_data(MIN_RATE));
        }
    }
}
