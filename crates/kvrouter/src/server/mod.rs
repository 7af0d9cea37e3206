//! The HTTP surface: hyper service, route table, admin endpoints, error shapes and the metrics endpoint.
//!
//! [`serve`] accepts connections on a bound listener (HTTP/1.1 and h2c via hyper-util's auto
//! builder, [`accept`]) and hands each request to [`routes::handle`], within the limits of
//! [`connections`] (first-head deadline, keep-alive idle timeout, HTTP/2 limits,
//! `--max-connections` with eviction of fresh and idle connections and a probe reserve) and,
//! for data-plane routes, [`admission`] (`--max-concurrent-requests`). [`run`] is what `src/bin/router.rs`
//! calls: build state, register `--worker-urls`, bind, announce readiness, serve until
//! SIGTERM/SIGINT, then drain gracefully and stop every background task ([`shutdown`]).

mod accept;
mod admission;
mod answer;
pub(crate) mod assembly;
mod attempt;
pub(crate) mod auth;
pub(crate) mod body;
pub mod connections;
pub(crate) mod data_plane;
pub(crate) mod engine_metrics;
pub(crate) mod error;
pub(crate) mod fanout_routes;
pub(crate) mod info;
pub(crate) mod pd_dispatch;
pub(crate) mod pd_merge;
pub(crate) mod prometheus;
pub(crate) mod refit_routes;
pub(crate) mod rl_api;
pub(crate) mod routes;
pub(crate) mod shutdown;
pub(crate) mod state;
mod upload_rate;
pub(crate) mod workers_api;

use std::io::Write;
use std::sync::{Arc, Weak};
use std::time::Duration;

use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

pub(crate) use attempt::{relay_response, RelayFrom};
pub use error::ApiError;
pub use state::AppState;

use crate::workers::WorkerSpec;

/// Serves `listener` with `state` until `state.shutdown` is cancelled, then drains: the
/// listener is closed, idle connections close at once, requests in flight get up to
/// `--shutdown-grace-period-secs` to finish, and what is still running then is aborted at
/// every worker (see [`shutdown`]).
pub async fn serve(listener: TcpListener, state: Arc<AppState>) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    accept::accept_loop(&listener, &state, &graceful).await;
    drop(listener);
    let grace = state.config.server.shutdown_grace_period;
    tracing::info!(
        grace_secs = grace.as_secs(),
        connections = graceful.count(),
        "shutting down: listener closed, draining requests in flight"
    );
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_ok()
    {
        tracing::info!("drained: every request in flight finished");
    } else {
        tracing::warn!(
            grace_secs = grace.as_secs(),
            "grace period over: aborting what is left at the workers"
        );
        shutdown::abort_all_at_workers(&state).await;
    }
    Ok(())
}

/// Registers the configured `--worker-urls` in the background (requests get 503 until one is healthy).
pub fn register_startup_workers(state: &AppState) {
    let pd = state
        .config
        .workers
        .pd
        .as_ref()
        .map(|pd| pd.startup_workers());
    let regular = state
        .config
        .workers
        .urls
        .iter()
        .map(|u| (u.clone(), WorkerSpec::default()));
    for (url, spec) in regular.chain(pd.into_iter().flatten()) {
        let url = &url;
        match state.registry.start_add_worker(url, spec) {
            Ok(a) => tracing::info!(%url, worker_id = %a.public_id, "registering worker"),
            Err(e) => tracing::error!(%url, error = %e, "cannot register worker"),
        }
    }
}

/// Periodically drops expired sticky keys until the state is gone or shutdown starts.
pub fn spawn_sticky_sweeper(state: &Arc<AppState>) {
    let weak: Weak<AppState> = Arc::downgrade(state);
    let every =
        (state.config.sticky_ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let token = state.shutdown.clone();
    state.tasks.spawn("sticky sweeper", async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                () = token.cancelled() => break,
                _ = tick.tick() => {}
            }
            let Some(state) = weak.upgrade() else { break };
            state.selector.sticky().sweep();
        }
    });
}

/// A router bound to its port and serving on the current runtime.
pub struct Started {
    /// The bound address (the real port when `--port 0`).
    pub addr: std::net::SocketAddr,
    /// The accept loop (on the state's tasks); abort it to stop accepting.
    pub task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Builds everything from `state`, binds `host:port`, registers the configured workers and
/// starts serving in a background task (used by [`run`] and by the in-process demo).
pub async fn start(state: Arc<AppState>) -> anyhow::Result<Started> {
    let addr = format!("{}:{}", state.config.server.host, state.config.server.port);
    let listener = connections::bind(&addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot bind {addr}: {e}"))?;
    let local = listener.local_addr()?;
    register_startup_workers(&state);
    if let Some(d) = crate::discovery::Discovery::start(
        state.config.workers.etcd.as_ref(),
        &state.config.mode.to_string(),
        &state.registry,
        local,
        &state.shutdown,
        &state.tasks,
    ) {
        let _ = state.discovery.set(d);
    }
    spawn_sticky_sweeper(&state);
    if let Some(flavor) = state.config.metrics_compat {
        crate::metrics::compat::model::follow(&state.tasks, state.registry.watch());
        let active = crate::metrics::compat::enable(flavor);
        if active != flavor {
            tracing::warn!(%flavor, %active, "another metrics compat flavour is already active in this process");
        }
    }
    prometheus::spawn(&state.config, &state.tasks).await?;
    tracing::info!(%local, mode = %state.config.mode, policy = state.selector.policy_name(), "router started");
    let tasks = state.tasks.clone();
    let task = tasks.spawn_with("server", |stop| async move {
        tokio::select! {
            served = serve(listener, state) => served,
            () = stop.cancelled() => Ok(()),
        }
    });
    Ok(Started { addr: local, task })
}

/// Starts the router, prints the readiness line and serves until SIGTERM/SIGINT, then drains
/// (see [`shutdown`]) and returns `Ok` (exit status 0).
pub async fn run(state: Arc<AppState>) -> anyhow::Result<()> {
    // Installed before the readiness line so a signal sent right after it is not lost.
    let mut signals = shutdown::Signals::install()?;
    let mut started = start(state.clone()).await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on http://{}", started.addr)?;
        out.flush()?;
    }
    tokio::select! {
        ended = &mut started.task => {
            ended??;
            shutdown::stop_tasks(&state, tokio::time::Instant::now()).await;
            return Ok(());
        }
        signal = signals.recv() => {
            tracing::info!(signal, "shutdown requested");
        }
    }
    let deadline = tokio::time::Instant::now() + state.config.server.shutdown_grace_period;
    state.shutdown.cancel();
    tokio::select! {
        ended = &mut started.task => ended??,
        signal = signals.recv() => {
            tracing::warn!(signal, "second signal: aborting requests in flight now");
            shutdown::abort_all_at_workers(&state).await;
        }
    }
    if let Some(d) = state.discovery.get() {
        d.stopped().await;
    }
    shutdown::stop_tasks(&state, deadline).await;
    Ok(())
}
