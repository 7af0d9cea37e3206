//! The registration probe: wait for `/health`, read `/server_info` (fallback
//! `/get_server_info`) and `/model_info` (fallback `/get_model_info`), and, in kv mode,
//! refuse a worker whose page size the router cannot fold into its own ([`PageSizeRule`]).

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::http::{http_get, http_get_json, HttpClient, HttpGetError};
use super::info::WorkerInfo;
use crate::backoff::ExponentialBackoff;

/// Why a worker could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddWorkerError {
    #[error("invalid worker url {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("worker {url} did not become healthy within {waited:?}: {last_error}")]
    Unreachable {
        url: String,
        waited: Duration,
        last_error: String,
    },
    #[error("worker {url} answers neither /server_info nor /get_server_info ({reason}); its page size is unknown")]
    ServerInfoUnavailable { url: String, reason: String },
    #[error("worker {url} uses page size {worker_page_size} but this router uses --page-size {router_page_size}; refusing it: in kv mode a worker's page size must equal the router's or divide it (its pages are then folded into router blocks). Start SGLang with --page-size {router_page_size} (or a divisor of it), or give the router --page-size {}", suggested_router_page(.worker_page_size, .router_page_size))]
    PageSizeMismatch {
        url: String,
        worker_page_size: u32,
        router_page_size: u32,
    },
    #[error("worker {url} is already being registered as {public_id}")]
    AlreadyPending { url: String, public_id: String },
    #[error("worker {url} is being removed (draining); retry once it is gone")]
    Draining { url: String },
    #[error("registration of {url} was cancelled (removed while probing)")]
    Cancelled { url: String },
}

impl AddWorkerError {
    /// Suggested HTTP status for the admin API.
    pub fn status_code(&self) -> u16 {
        match self {
            AddWorkerError::InvalidUrl { .. } | AddWorkerError::PageSizeMismatch { .. } => 400,
            AddWorkerError::AlreadyPending { .. }
            | AddWorkerError::Draining { .. }
            | AddWorkerError::Cancelled { .. } => 409,
            AddWorkerError::Unreachable { .. } | AddWorkerError::ServerInfoUnavailable { .. } => {
                502
            }
        }
    }

    /// Short machine-readable code for error bodies.
    pub fn code(&self) -> &'static str {
        match self {
            AddWorkerError::InvalidUrl { .. } => "invalid_worker_url",
            AddWorkerError::Unreachable { .. } => "worker_unreachable",
            AddWorkerError::ServerInfoUnavailable { .. } => "worker_server_info_unavailable",
            AddWorkerError::PageSizeMismatch { .. } => "page_size_mismatch",
            AddWorkerError::AlreadyPending { .. } => "worker_registration_pending",
            AddWorkerError::Draining { .. } => "worker_draining",
            AddWorkerError::Cancelled { .. } => "worker_registration_cancelled",
        }
    }
}

/// Which worker page sizes registration accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageSizeRule {
    /// Any (round-robin, random, least-load: routing never hashes the worker's blocks).
    Any,
    /// kv mode with `--page-size router`: the router's page size, or a divisor of it (the
    /// worker's events are folded into router blocks, `events/fold.rs`).
    Folds { router: u32 },
}

impl PageSizeRule {
    /// Whether a worker with pages of `worker` tokens can be registered.
    pub fn accepts(self, worker: u32) -> bool {
        match self {
            PageSizeRule::Any => true,
            PageSizeRule::Folds { router } => {
                worker == router || kvrouter_index::folds_into(worker, router)
            }
        }
    }
}

/// The smallest router page size that keeps a worker of `worker` tokens per page and
/// every worker that fits `router` (a multiple of both).
fn suggested_router_page(worker: &u32, router: &u32) -> u64 {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    let (w, r) = (u64::from((*worker).max(1)), u64::from((*router).max(1)));
    w / gcd(w, r) * r
}

/// Timeouts of one registration probe.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProbeTimeouts {
    /// Deadline of each HTTP call.
    pub request: Duration,
    /// How long `/health` is retried while the worker warms up.
    pub startup: Duration,
}

/// Probes `url` (normalized, no trailing slash) and returns its info, or the reason
/// to refuse it. Page-size mismatches are logged at error level.
pub(crate) async fn probe_worker(
    client: &HttpClient,
    url: &str,
    api_key: Option<&str>,
    page_sizes: PageSizeRule,
    timeouts: ProbeTimeouts,
) -> Result<WorkerInfo, AddWorkerError> {
    wait_healthy(client, url, api_key, timeouts).await?;
    read_info(client, url, api_key, page_sizes, timeouts.request).await
}

/// Retries `GET /health` with a growing backoff until it answers 2xx or `startup` passes.
/// A 401/403 is retried too (the worker may still be starting, or its key may be given
/// later), with one warning saying the worker wants a key and how to give it.
pub(crate) async fn wait_healthy(
    client: &HttpClient,
    url: &str,
    api_key: Option<&str>,
    timeouts: ProbeTimeouts,
) -> Result<(), AddWorkerError> {
    let start = Instant::now();
    // 50 ms doubling to 1 s, no jitter.
    const BACKOFF: ExponentialBackoff =
        ExponentialBackoff::constant(Duration::from_millis(50), Duration::from_secs(1));
    let mut backoff = BACKOFF.start();
    let mut key_warned = false;
    loop {
        let last_error = match http_get(client, &format!("{url}/health"), api_key, timeouts.request)
            .await
        {
            Ok((status, _)) if (200..300).contains(&status) => return Ok(()),
            Ok((status @ (401 | 403), _)) => {
                if !key_warned {
                    key_warned = true;
                    warn_wants_key(url, status, api_key.is_some(), timeouts.startup);
                }
                format!("/health answered HTTP {status}: the worker wants a (different) API key")
            }
            Ok((status, _)) => format!("/health answered HTTP {status}"),
            Err(e) => format!("/health: {e}"),
        };
        let waited = start.elapsed();
        if waited + backoff.current() > timeouts.startup {
            return Err(AddWorkerError::Unreachable {
                url: url.to_string(),
                waited,
                last_error,
            });
        }
        tracing::debug!(worker = url, %last_error, "waiting for worker to become healthy");
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

/// The one warning of a registration whose probe is refused for want of a key.
fn warn_wants_key(url: &str, status: u16, had_key: bool, startup: Duration) {
    let sent = if had_key {
        "the key sent was refused"
    } else {
        "no key was sent"
    };
    tracing::warn!(
        worker = url,
        status,
        "worker wants an API key ({sent}): give it with --api-key (the default worker key), \
         POST /workers {{\"url\", \"api_key\"}}, or credentials in the worker URL; the probe \
         keeps retrying for --worker-startup-timeout-secs ({} s); to change the key now, \
         DELETE /workers/<url> and add it again",
        startup.as_secs()
    );
}

/// Reads server and model info and checks the page size.
pub(crate) async fn read_info(
    client: &HttpClient,
    url: &str,
    api_key: Option<&str>,
    page_sizes: PageSizeRule,
    timeout: Duration,
) -> Result<WorkerInfo, AddWorkerError> {
    let server_info = get_with_fallback(
        client,
        url,
        "/server_info",
        "/get_server_info",
        api_key,
        timeout,
    )
    .await
    .map_err(|e| AddWorkerError::ServerInfoUnavailable {
        url: url.to_string(),
        reason: e.to_string(),
    })?;
    let model_info = match get_with_fallback(
        client,
        url,
        "/model_info",
        "/get_model_info",
        api_key,
        timeout,
    )
    .await
    {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(worker = url, error = %e, "no model info; continuing without it");
            None
        }
    };
    let info = WorkerInfo::from_json(&server_info, model_info.as_ref());
    check_page_size(url, &info, page_sizes)?;
    Ok(info)
}

/// Refuses a page size `page_sizes` does not accept, loudly.
pub(crate) fn check_page_size(
    url: &str,
    info: &WorkerInfo,
    page_sizes: PageSizeRule,
) -> Result<(), AddWorkerError> {
    // The size the worker hashes its published blocks at (`kv_events.block_size`, which is
    // page size x DCP size under DCP), else its page size.
    let worker_page_size = info.event_block_size();
    if page_sizes.accepts(worker_page_size) {
        return Ok(());
    }
    let PageSizeRule::Folds {
        router: router_page_size,
    } = page_sizes
    else {
        return Ok(());
    };
    let err = AddWorkerError::PageSizeMismatch {
        url: url.to_string(),
        worker_page_size,
        router_page_size,
    };
    tracing::error!(worker = url, worker_page_size, router_page_size, "{err}");
    Err(err)
}

/// GET `primary`, falling back to `fallback` on any HTTP error status (older and
/// newer SGLang spell these endpoints differently). Connection errors do not fall back.
async fn get_with_fallback(
    client: &HttpClient,
    url: &str,
    primary: &str,
    fallback: &str,
    api_key: Option<&str>,
    timeout: Duration,
) -> Result<Value, HttpGetError> {
    match http_get_json(client, &format!("{url}{primary}"), api_key, timeout).await {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) | Err(HttpGetError::Status(_)) | Err(HttpGetError::Json(_)) => {
            http_get_json(client, &format!("{url}{fallback}"), api_key, timeout).await
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(page_size: u32) -> WorkerInfo {
        WorkerInfo {
            page_size,
            ..WorkerInfo::default()
        }
    }

    #[test]
    fn mismatch_names_both_sizes_and_what_to_change() {
        let kv = PageSizeRule::Folds { router: 16 };
        let err = check_page_size("http://w:1", &info(24), kv).expect_err("must refuse");
        let msg = err.to_string();
        assert!(
            msg.contains("page size 24") && msg.contains("--page-size 16"),
            "{msg}"
        );
        assert!(
            msg.contains("Start SGLang with --page-size 16")
                && msg.contains("give the router --page-size 48"),
            "{msg}"
        );
        assert_eq!(err.status_code(), 400);
        assert_eq!(err.code(), "page_size_mismatch");
        let err = check_page_size("http://w:1", &info(32), kv).expect_err("larger: refused");
        assert!(err.to_string().contains("--page-size 32"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_worker_failing_its_probes_is_given_up_at_the_startup_deadline() {
        // No request can be sent to this address: every probe fails at once, with no socket.
        let client = super::super::http::new_client(Duration::from_secs(1), Duration::from_secs(1));
        let timeouts = ProbeTimeouts {
            request: Duration::from_secs(1),
            startup: Duration::from_secs(5),
        };
        let start = Instant::now();
        let err = wait_healthy(&client, "http://bad host", None, timeouts)
            .await
            .expect_err("never healthy");
        let AddWorkerError::Unreachable {
            waited, last_error, ..
        } = err
        else {
            panic!("{err:?}");
        };
        // Probes at 0, 50, 150, 350, 750 ms, 1.55, 2.55, 3.55 and 4.55 s (50 ms doubling to
        // 1 s): the next one would come after the 5 s deadline.
        assert_eq!(waited, Duration::from_millis(4_550));
        assert_eq!(start.elapsed(), waited);
        assert!(last_error.contains("invalid url"), "{last_error}");
    }

    #[test]
    fn kv_mode_takes_divisors_and_other_modes_take_anything() {
        let kv = PageSizeRule::Folds { router: 16 };
        for ok in [1, 2, 4, 8, 16] {
            assert!(check_page_size("http://w:1", &info(ok), kv).is_ok(), "{ok}");
        }
        for refused in [3, 6, 24, 32, 64] {
            assert!(!kv.accepts(refused), "{refused}");
        }
        for any in [1, 3, 24, 32, 64] {
            assert!(check_page_size("http://w:1", &info(any), PageSizeRule::Any).is_ok());
        }
    }
}
