//! Polling a condition until a deadline, for states that have no readiness signal
//! (router views, index contents, handshakes); panics naming what never happened.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// Polls `check` every 20 ms until it returns true or 30 s pass (then panics with `what`).
pub async fn wait_for<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Deadline::after(Duration::from_secs(30));
    while !check().await {
        deadline.check(what);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A deadline for polling loops: `check` panics naming what never happened.
pub struct Deadline(Instant);

impl Deadline {
    pub fn after(within: Duration) -> Self {
        Deadline(Instant::now() + within)
    }

    /// Panics with `what` once the deadline has passed.
    pub fn check(&self, what: &str) {
        assert!(Instant::now() < self.0, "timed out waiting for {what}");
    }
}
