//! Graceful shutdown on SIGTERM / SIGINT.
//!
//! The sequence (driven by [`super::run`] and [`super::serve`]):
//! 1. a signal arrives: [`AppState::shutdown`] (one `CancellationToken`) is cancelled;
//!    `/readiness` answers 503 from then on, the accept loop stops and the listener is
//!    closed (new connections are refused), idle keep-alive connections are closed at
//!    once and busy ones after their current response (hyper-util `GracefulShutdown`);
//!    background tasks that watch the token (the sticky sweeper) stop;
//! 2. requests in flight may finish for `--shutdown-grace-period-secs` (default 180);
//! 3. if some are still running then, every registered worker gets
//!    `POST /abort_request {"rid": "", "abort_all": true}` (the router does not track the rid
//!    of every request, so the abort is worker-wide);
//! 4. every background task ([`AppState::tasks`]: event sources, health checks, the
//!    Prometheus listener, sharing, connections left) is stopped and awaited for what is left
//!    of the grace (at least [`TASKS_MIN_GRACE`]); those still running then are logged by
//!    name, and the router exits with status 0.

use std::time::Duration;

use tokio::time::Instant;

use super::state::AppState;
use crate::proxy::abort::post_abort;

pub(crate) use crate::signals::Signals;

/// What the background tasks get to stop when the drain used up the grace.
pub(crate) const TASKS_MIN_GRACE: Duration = Duration::from_secs(1);

/// Step 4: stops every background task, waiting until `deadline` (the end of the grace) and
/// at least [`TASKS_MIN_GRACE`].
pub(crate) async fn stop_tasks(state: &AppState, deadline: Instant) {
    let grace = deadline
        .saturating_duration_since(Instant::now())
        .max(TASKS_MIN_GRACE);
    let running = state.tasks.len();
    if state.tasks.shutdown(grace).await.is_empty() {
        tracing::info!(tasks = running, "background tasks stopped");
    }
}

/// Sends `POST /abort_request {"rid": "", "abort_all": true}` to every registered worker and
/// waits for the answers (each bounded by 5 s); failures are logged only.
pub(crate) async fn abort_all_at_workers(state: &AppState) {
    let workers = state.registry.snapshot();
    let body = serde_json::json!({ "rid": "", "abort_all": true });
    let calls = workers.iter().map(|w| {
        let url = &w.url;
        let (client, body) = (&state.client, &body);
        async move {
            match post_abort(client, w.as_ref().into(), body).await {
                Ok(status) => tracing::info!(%url, %status, "abort-all sent"),
                Err(e) => tracing::warn!(%url, error = %e, "abort-all failed"),
            }
        }
    });
    futures::future::join_all(calls).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use http::StatusCode;

    #[tokio::test]
    async fn readiness_is_503_once_the_drain_started() {
        let state = AppState::new(Config {
            mode: crate::config::Mode::RoundRobin,
            ..Config::default()
        });
        state.shutdown.cancel();
        let resp = super::super::info::readiness(&state);
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
}
