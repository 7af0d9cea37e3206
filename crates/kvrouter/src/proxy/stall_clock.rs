//! The stall clock of a relayed body: when a body that sends nothing for `after` is given up
//! (only if its worker is unhealthy then; a slow healthy worker is looked at again every
//! `min(after, 1 s)`). Data does not move the timer (a timer reset per chunk costs a
//! timer-wheel update): it is moved when it fires early, from the last data's instant.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// How often a worker found quiet past `idle` is looked at again: every `idle`, at most a
/// second (a relayed body's clock and the response-head watch of `forward.rs` alike).
pub(crate) fn recheck_every(idle: Duration) -> Duration {
    idle.min(Duration::from_secs(1))
}

/// One body's stall clock (see module docs).
pub(crate) struct StallClock {
    after: Duration,
    timer: Pin<Box<Sleep>>,
    /// When the last body chunk came (or the clock started).
    last_data: Instant,
}

impl StallClock {
    /// A clock started now.
    pub(crate) fn new(after: Duration) -> StallClock {
        StallClock {
            after,
            timer: Box::pin(tokio::time::sleep(after)),
            last_data: Instant::now(),
        }
    }

    /// How long a body must be quiet to be given up.
    pub(crate) fn after(&self) -> Duration {
        self.after
    }

    /// A chunk came now.
    pub(crate) fn data(&mut self) {
        self.last_data = Instant::now();
    }

    /// Ready when the body has been quiet for `after` and `unhealthy()` says so at a look;
    /// otherwise pending, woken at the next look.
    pub(crate) fn poll_stalled(
        &mut self,
        cx: &mut Context<'_>,
        unhealthy: impl Fn() -> bool,
    ) -> Poll<()> {
        let recheck = recheck_every(self.after);
        while self.timer.as_mut().poll(cx).is_ready() {
            let quiet_until = self.last_data + self.after;
            if quiet_until > Instant::now() {
                // Data came since the timer was set: not quiet long enough yet.
                self.timer.as_mut().reset(quiet_until);
                continue;
            }
            if unhealthy() {
                return Poll::Ready(());
            }
            let next = Instant::now() + recheck;
            self.timer.as_mut().reset(next);
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;
    use tokio::time::sleep;

    const AFTER: Duration = Duration::from_secs(30);

    #[tokio::test(start_paused = true)]
    async fn a_quiet_body_of_an_unhealthy_worker_stalls_after_the_idle_time_from_its_last_data() {
        let start = Instant::now();
        let mut clock = StallClock::new(AFTER);
        sleep(Duration::from_secs(20)).await;
        clock.data();
        poll_fn(|cx| clock.poll_stalled(cx, || true)).await;
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(50),
            "30 s after the data at 20 s"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_healthy_worker_is_looked_at_every_second_until_it_turns_unhealthy() {
        let start = Instant::now();
        let sick = Arc::new(AtomicBool::new(false));
        let tasks = crate::tasks::Tasks::new();
        tasks.spawn("turns unhealthy at 42.5 s", {
            let sick = sick.clone();
            async move {
                sleep(Duration::from_millis(42_500)).await;
                sick.store(true, Ordering::Relaxed);
            }
        });
        let mut clock = StallClock::new(AFTER);
        poll_fn(|cx| clock.poll_stalled(cx, || sick.load(Ordering::Relaxed))).await;
        assert_eq!(start.elapsed(), Duration::from_secs(43));
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_idle_time_rechecks_at_that_time() {
        let start = Instant::now();
        let looks = std::cell::Cell::new(0);
        let mut clock = StallClock::new(Duration::from_millis(300));
        poll_fn(|cx| {
            clock.poll_stalled(cx, || {
                looks.set(looks.get() + 1);
                looks.get() == 3
            })
        })
        .await;
        assert_eq!(start.elapsed(), Duration::from_millis(900));
    }
}
