//! The retry driver: runs attempts until one is final, waiting a backoff between them.
//!
//! The loop is apart from the attempt (as in SMG's `routers/common/retry.rs`): an
//! [`Attempts`] implementation makes one attempt and classifies its output (final, or worth
//! another try and why); [`run`] repeats, sleeps the [`ExponentialBackoff`] between attempts,
//! stops after `max_retries` retries, or when the next attempt could not start before the
//! request's deadline, with [`Retried::Exhausted`], and tells [`RetryHooks`] (metrics, logs).
//! The data plane's attempts end at the response head, so nothing is ever retried after a
//! byte reached the client.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::ExponentialBackoff;
use crate::workers::BreakerConfig;

/// The validated retry options, built once by `config`: how many retries, the wait between
/// attempts (`--retry-*`), and the circuit breaker that takes a failing worker out of them
/// (`--cb-*`, `--disable-circuit-breaker`; applied by the registry to every worker).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetrySettings {
    /// Extra attempts after the first one (0 = no retry; `--retry-max-retries` counts the
    /// first attempt too, as sgl-router does).
    pub max_retries: u32,
    /// The wait between attempts (`--retry-*-backoff-ms`, multiplier, jitter).
    pub backoff: ExponentialBackoff,
    /// Every worker's circuit breaker.
    pub breaker: BreakerConfig,
}

impl RetrySettings {
    /// The policy of one request whose attempts must start before `deadline`.
    pub fn policy(&self, deadline: Instant) -> RetryPolicy {
        RetryPolicy {
            max_retries: self.max_retries,
            backoff: self.backoff,
            deadline: Some(deadline),
        }
    }
}

/// How many times to retry and how long to wait in between.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Retries after the first attempt (so at most `max_retries + 1` attempts).
    pub max_retries: u32,
    pub backoff: ExponentialBackoff,
    /// No attempt starts at or after this instant (the request timeout).
    pub deadline: Option<Instant>,
}

/// One kind of attempt, repeated by [`run`].
pub(crate) trait Attempts: Send {
    /// What one attempt produced (success or failure alike).
    type Output: Send;
    /// Why an output deserves another attempt (e.g. a metrics label).
    type Reason: Send;
    /// Runs attempt number `n` (0-based).
    fn attempt(&mut self, n: u32) -> impl Future<Output = Self::Output> + Send;
    /// `Some(reason)` when `output` should be retried, `None` when it is final.
    fn should_retry(&self, output: &Self::Output) -> Option<Self::Reason>;
}

/// Observers of the loop (all optional).
pub(crate) trait RetryHooks<R>: Send {
    /// Attempt `attempt` (0-based) will be retried after `delay`.
    fn on_retry(&mut self, _attempt: u32, _reason: &R, _delay: Duration) {}
    /// The last allowed attempt (`attempts` in all) still asked for a retry.
    fn on_exhausted(&mut self, _attempts: u32, _reason: &R) {}
}

/// No hooks.
impl<R> RetryHooks<R> for () {}

/// How the loop ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Retried<T> {
    /// An attempt produced a final output.
    Done(T),
    /// Every allowed attempt asked for a retry: the last one's output.
    Exhausted(T),
}

impl<T> Retried<T> {
    /// The last attempt's output, however the loop ended.
    pub(crate) fn into_inner(self) -> T {
        match self {
            Retried::Done(t) | Retried::Exhausted(t) => t,
        }
    }
}

/// Runs `attempts` under `policy` (see module docs). A retried output is dropped before the
/// backoff sleep, so whatever it holds (a booking, a connection) is released first.
pub(crate) async fn run<A, H>(
    policy: &RetryPolicy,
    attempts: &mut A,
    hooks: &mut H,
) -> Retried<A::Output>
where
    A: Attempts,
    H: RetryHooks<A::Reason>,
{
    let mut n = 0u32;
    loop {
        let output = attempts.attempt(n).await;
        let delay = {
            let Some(reason) = attempts.should_retry(&output) else {
                return Retried::Done(output);
            };
            let delay = policy.backoff.delay(n);
            let late = policy.deadline.is_some_and(|d| Instant::now() + delay >= d);
            if n >= policy.max_retries || late {
                hooks.on_exhausted(n + 1, &reason);
                return Retried::Exhausted(output);
            }
            drop(output);
            hooks.on_retry(n, &reason, delay);
            delay
        };
        tokio::time::sleep(delay).await;
        n += 1;
    }
}

/// The worker statuses sgl-router retries (`is_retryable_status` in its `core/retry.rs`):
/// 408, 429, 500, 502, 503, 504.
pub(crate) fn is_retryable_status(status: http::StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 429 | 500 | 502 | 503 | 504)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outputs: `Ok(v)` final, `Err(true)` retryable, `Err(false)` final failure.
    struct Script {
        outputs: Vec<Result<u32, bool>>,
        at: Vec<Instant>,
    }

    impl Attempts for Script {
        type Output = Result<u32, bool>;
        type Reason = &'static str;
        async fn attempt(&mut self, n: u32) -> Self::Output {
            self.at.push(Instant::now());
            self.outputs[n as usize]
        }
        fn should_retry(&self, output: &Self::Output) -> Option<&'static str> {
            (*output == Err(true)).then_some("busy")
        }
    }

    #[derive(Default)]
    struct Seen {
        retries: Vec<(u32, Duration)>,
        exhausted: Option<u32>,
    }

    impl RetryHooks<&'static str> for Seen {
        fn on_retry(&mut self, attempt: u32, _: &&'static str, delay: Duration) {
            self.retries.push((attempt, delay));
        }
        fn on_exhausted(&mut self, attempts: u32, _: &&'static str) {
            self.exhausted = Some(attempts);
        }
    }

    fn policy(max_retries: u32) -> RetryPolicy {
        RetryPolicy {
            deadline: None,
            max_retries,
            backoff: ExponentialBackoff::new(
                Duration::from_millis(100),
                Duration::from_millis(250),
                0.0,
            )
            .expect("valid"),
        }
    }

    fn script(outputs: Vec<Result<u32, bool>>) -> Script {
        Script {
            outputs,
            at: Vec::new(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_until_success() {
        let mut s = script(vec![Err(true), Err(true), Ok(7)]);
        let mut seen = Seen::default();
        assert_eq!(
            run(&policy(5), &mut s, &mut seen).await,
            Retried::Done(Ok(7))
        );
        assert_eq!(s.at.len(), 3);
        assert_eq!(seen.retries.len(), 2);
        assert_eq!(seen.exhausted, None);
    }

    #[tokio::test(start_paused = true)]
    async fn stops_at_max_retries() {
        let mut s = script(vec![Err(true); 10]);
        let mut seen = Seen::default();
        let out = run(&policy(2), &mut s, &mut seen).await;
        assert_eq!(out, Retried::Exhausted(Err(true)));
        assert_eq!(out.into_inner(), Err(true));
        assert_eq!(s.at.len(), 3);
        assert_eq!(seen.exhausted, Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn does_not_retry_final_failures() {
        let mut s = script(vec![Err(false), Ok(1)]);
        let mut seen = Seen::default();
        assert_eq!(
            run(&policy(3), &mut s, &mut seen).await,
            Retried::Done(Err(false))
        );
        assert_eq!(s.at.len(), 1);
        assert!(seen.retries.is_empty());
        assert_eq!(
            run(&policy(0), &mut script(vec![Err(true)]), &mut ()).await,
            Retried::Exhausted(Err(true))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_attempt_starts_past_the_deadline() {
        let mut s = script(vec![Err(true); 10]);
        let mut seen = Seen::default();
        let p = RetryPolicy {
            deadline: Some(Instant::now() + Duration::from_millis(350)),
            ..policy(9)
        };
        // Attempts at 0, 100 and 300 ms; the next (at 550) would pass the deadline.
        let out = run(&p, &mut s, &mut seen).await;
        assert_eq!(out, Retried::Exhausted(Err(true)));
        assert_eq!(s.at.len(), 3);
        assert_eq!(seen.exhausted, Some(3));
    }

    #[test]
    fn retried_statuses_are_sgl_routers() {
        let retried: Vec<u16> = (100..600)
            .filter(|&c| http::StatusCode::from_u16(c).is_ok_and(is_retryable_status))
            .collect();
        assert_eq!(retried, [408, 429, 500, 502, 503, 504]);
    }

    #[tokio::test(start_paused = true)]
    async fn waits_the_backoff_between_attempts() {
        let mut s = script(vec![Err(true), Err(true), Err(true), Ok(0)]);
        let mut seen = Seen::default();
        let t0 = Instant::now();
        run(&policy(5), &mut s, &mut seen).await;
        let ms = Duration::from_millis;
        assert_eq!(seen.retries, vec![(0, ms(100)), (1, ms(200)), (2, ms(250))]);
        let gaps: Vec<Duration> = s.at.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps, vec![ms(100), ms(200), ms(250)]);
        assert_eq!(Instant::now() - t0, ms(550));
    }
}
