//! Polling a condition until a deadline, for states that have no readiness signal
//! (router views, index contents, handshakes); panics naming what never happened.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// Runs `step` every `every` until it returns `Ok`, for at most `within`; on timeout
/// panics with `what` and the last `Err` description.
pub async fn poll<T, F, Fut>(what: &str, within: Duration, every: Duration, mut step: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + within;
    loop {
        match step().await {
            Ok(v) => return v,
            Err(last) => assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; last: {last}"
            ),
        }
        tokio::time::sleep(every).await;
    }
}

/// Polls `check` every 20 ms until it returns true or 30 s pass (then panics with `what`).
pub async fn wait_for<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    poll(
        what,
        Duration::from_secs(30),
        Duration::from_millis(20),
        || {
            let done = check();
            async move {
                if done.await {
                    Ok(())
                } else {
                    Err("condition false".to_string())
                }
            }
        },
    )
    .await
}

/// A deadline for loops that need mutable state between tries (where `poll`'s closure
/// cannot lend it).
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
