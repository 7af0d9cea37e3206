//! Validated retry and circuit-breaker settings (`Config::retry`: `proxy::retry::RetrySettings`,
//! backoff and breaker): the flags are declared in options.rs with sgl-router's names and
//! defaults; this file checks them and builds the backoff schedule and the breaker settings.

use std::time::Duration;

use super::{invalid, secs, ConfigError, Options};
use crate::backoff::{ExponentialBackoff, InvalidBackoff};
use crate::workers::BreakerConfig;

/// Retries after the first attempt: sgl-router counts `--retry-max-retries` as attempts in
/// all (0 and 1: a single attempt); `--disable-retries` means none.
pub(super) fn retries_after_first(o: &Options) -> u32 {
    if o.disable_retries {
        0
    } else {
        o.retry_max_retries.saturating_sub(1)
    }
}

/// `--retry-initial-backoff-ms` x `--retry-backoff-multiplier` per retry, capped at
/// `--retry-max-backoff-ms`, with `--retry-jitter-factor`.
pub(super) fn retry_backoff(o: &Options) -> Result<ExponentialBackoff, ConfigError> {
    let min = Duration::from_millis(o.retry_initial_backoff_ms);
    let max = Duration::from_millis(o.retry_max_backoff_ms);
    ExponentialBackoff::new(min, max, o.retry_jitter_factor)
        .and_then(|b| b.with_multiplier(o.retry_backoff_multiplier))
        .map_err(|e| match e {
            InvalidBackoff::MinAboveMax { .. } => invalid(
                "retry_max_backoff_ms",
                "must not be smaller than retry_initial_backoff_ms",
            ),
            InvalidBackoff::Jitter(j) => invalid(
                "retry_jitter_factor",
                format!("must be between 0 and 1 (got {j})"),
            ),
            InvalidBackoff::Multiplier(m) => invalid(
                "retry_backoff_multiplier",
                format!("must be at least 1 (got {m})"),
            ),
        })
}

/// The `--cb-*` flags; thresholds of at least 1, positive durations (the window is checked
/// as sgl-router checks it, and unused as there).
pub(super) fn circuit_breaker(o: &Options) -> Result<BreakerConfig, ConfigError> {
    if o.cb_failure_threshold == 0 {
        return Err(invalid("cb_failure_threshold", "must be at least 1"));
    }
    if o.cb_success_threshold == 0 {
        return Err(invalid("cb_success_threshold", "must be at least 1"));
    }
    secs("cb_window_duration_secs", o.cb_window_duration_secs)?;
    Ok(BreakerConfig {
        failure_threshold: o.cb_failure_threshold,
        success_threshold: o.cb_success_threshold,
        timeout: secs("cb_timeout_duration_secs", o.cb_timeout_duration_secs)?,
        disabled: o.disable_circuit_breaker,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(r: Result<impl std::fmt::Debug, ConfigError>) -> String {
        r.expect_err("must be refused").field
    }

    #[test]
    fn defaults_are_sgl_routers() {
        let o = Options::default();
        assert_eq!(retries_after_first(&o), 4, "5 attempts in all");
        let b = retry_backoff(&o).expect("valid");
        assert_eq!(b.min(), Duration::from_millis(50));
        assert_eq!(b.max(), Duration::from_secs(30));
        assert_eq!(
            circuit_breaker(&o).expect("valid"),
            BreakerConfig {
                failure_threshold: 10,
                success_threshold: 3,
                timeout: Duration::from_secs(60),
                disabled: false,
            }
        );
    }

    #[test]
    fn attempts_count_as_sgl_router_counts_them() {
        let with = |n, disable| Options {
            retry_max_retries: n,
            disable_retries: disable,
            ..Options::default()
        };
        assert_eq!(retries_after_first(&with(0, false)), 0);
        assert_eq!(retries_after_first(&with(1, false)), 0);
        assert_eq!(retries_after_first(&with(3, false)), 2);
        assert_eq!(retries_after_first(&with(5, true)), 0);
    }

    #[test]
    fn bad_values_name_their_flag() {
        let o = Options::default();
        let bad = |f: fn(&mut Options)| {
            let mut o = o.clone();
            f(&mut o);
            o
        };
        assert_eq!(
            field(retry_backoff(&bad(|o| o.retry_jitter_factor = 1.5))),
            "retry_jitter_factor"
        );
        assert_eq!(
            field(retry_backoff(&bad(|o| o.retry_backoff_multiplier = 0.5))),
            "retry_backoff_multiplier"
        );
        assert_eq!(
            field(retry_backoff(&bad(|o| o.retry_max_backoff_ms = 1))),
            "retry_max_backoff_ms"
        );
        assert_eq!(
            field(circuit_breaker(&bad(|o| o.cb_failure_threshold = 0))),
            "cb_failure_threshold"
        );
        assert_eq!(
            field(circuit_breaker(&bad(|o| o.cb_success_threshold = 0))),
            "cb_success_threshold"
        );
        assert_eq!(
            field(circuit_breaker(&bad(|o| o.cb_timeout_duration_secs = 0.0))),
            "cb_timeout_duration_secs"
        );
        assert_eq!(
            field(circuit_breaker(&bad(|o| o.cb_window_duration_secs = -1.0))),
            "cb_window_duration_secs"
        );
    }
}
