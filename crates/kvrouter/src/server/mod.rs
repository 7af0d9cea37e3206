//! The HTTP surface: hyper service, route table, admin endpoints, error shapes and the metrics endpoint.
//!
//! [`serve`] accepts connections on a bound listener (HTTP/1.1 and h2c via hyper-util's auto
//! builder) and hands each request to [`routes::handle`]. [`run`] is what `src/bin/router.rs`
//! calls: build state, register `--worker-urls`, bind, announce readiness, serve.

mod attempt;
pub mod auth;
pub mod body;
pub mod data_plane;
pub mod engine_metrics;
pub mod error;
pub mod fanout_routes;
pub mod info;
pub mod prometheus;
pub mod refit_routes;
pub mod rl_api;
pub mod routes;
pub mod state;
pub mod workers_api;

use std::io::Write;
use std::sync::{Arc, Weak};
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

pub use error::ApiError;
pub use state::AppState;

use crate::workers::WorkerSpec;

/// Serves `listener` forever with `state`.
pub async fn serve(listener: TcpListener, state: Arc<AppState>) -> std::io::Result<()> {
    let builder = auto::Builder::new(TokioExecutor::new());
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors and similar: back off briefly instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let builder = builder.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, std::convert::Infallible>(routes::handle(&state, req).await) }
            });
            if let Err(e) = builder.serve_connection(TokioIo::new(stream), svc).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}

/// Registers the configured `--worker-urls` in the background (requests get 503 until one is healthy).
pub fn register_startup_workers(state: &AppState) {
    for url in &state.config.worker_urls {
        match state.registry.start_add_worker(url, WorkerSpec::default()) {
            Ok(a) => tracing::info!(%url, worker_id = %a.public_id, "registering worker"),
            Err(e) => tracing::error!(%url, error = %e, "cannot register worker"),
        }
    }
}

/// Periodically drops expired sticky keys until the state is gone.
pub fn spawn_sticky_sweeper(state: &Arc<AppState>) {
    let weak: Weak<AppState> = Arc::downgrade(state);
    let every =
        (state.config.sticky_ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            let Some(state) = weak.upgrade() else { break };
            state.selector.sticky().sweep();
        }
    });
}

/// A router bound to its port and serving on the current runtime.
pub struct Started {
    /// The bound address (the real port when `--port 0`).
    pub addr: std::net::SocketAddr,
    /// The accept loop; abort it to stop accepting.
    pub task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Builds everything from `state`, binds `host:port`, registers the configured workers and
/// starts serving in a background task (used by [`run`] and by the in-process demo).
pub async fn start(state: Arc<AppState>) -> anyhow::Result<Started> {
    let addr = format!("{}:{}", state.config.host, state.config.port);
    let listener = TcpListener::bind(&addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot bind {addr}: {e}"))?;
    let local = listener.local_addr()?;
    register_startup_workers(&state);
    spawn_sticky_sweeper(&state);
    prometheus::spawn(&state.config).await?;
    tracing::info!(%local, mode = %state.config.mode, policy = state.selector.policy_name(), "router started");
    let task = tokio::spawn(serve(listener, state));
    Ok(Started { addr: local, task })
}

/// Starts the router, prints the readiness line and serves until the accept loop ends.
pub async fn run(state: Arc<AppState>) -> anyhow::Result<()> {
    let started = start(state).await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on http://{}", started.addr)?;
        out.flush()?;
    }
    started.task.await??;
    Ok(())
}
