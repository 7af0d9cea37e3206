//! `sglang-mock`: a simulated SGLang server that a client cannot tell from SGLang at the
//! HTTP and KV-event level. One process serves `--dp-size` ranks; each rank has its own
//! scheduler task (continuous batching over a paged radix KV cache, simulated step
//! times) and its own ZMQ event publisher. See `docs/mock.md`.
//!
//! Layout: `config` (CLI), `tokenizer`/`sampler` (deterministic stand-ins), `cache`
//! (radix tree + SGLang block hash), `engine` (scheduler and its driver), `kv_events`
//! (msgpack + ZMQ), `http` (routes), `metrics` (`sglang:*`), `state` (shared handles),
//! `pd` (the PD disaggregation roles).

pub mod cache;
pub mod config;
pub mod engine;
pub mod http;
pub mod kv_events;
pub mod load;
pub mod lora;
pub mod metrics;
pub mod pd;
pub mod sampler;
pub mod state;
pub mod tokenizer;

use std::io::Write;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use kvrouter::server::connections::bind_with_backlog;

use config::KvEventsConfig;
pub use config::MockArgs;
use engine::{Limits, Scheduler};
use state::{Launch, MockState};

/// A mock started in-process (for benches and tests that avoid a child process).
pub struct RunningMock {
    /// Base URL, e.g. `http://127.0.0.1:40123`.
    pub url: String,
    /// `kv_events_config` as `/server_info` reports it (actual endpoints), if any.
    pub kv_events_config: Option<String>,
    /// The HTTP accept loop; abort it to stop serving.
    pub server: tokio::task::JoinHandle<()>,
}

/// Binds the HTTP listener and the event sockets, starts the rank tasks and the accept
/// loop on the current tokio runtime, and returns once connections are accepted.
pub async fn start(args: MockArgs) -> anyhow::Result<RunningMock> {
    let launched = std::time::Instant::now();
    args.validate()
        .and_then(|()| lora::Adapters::from_args(&args).map(drop))
        .and_then(|()| pd::state::validate_args(&args))
        .map_err(|e| anyhow!(e))?;
    if let Some(path) = &args.tokenizer_path {
        tokenizer::install(path).map_err(|e| anyhow!("--tokenizer-path: {e}"))?;
    }
    let load_weight = launched.elapsed();
    let kv_cfg = args
        .kv_events_config
        .as_deref()
        .map(KvEventsConfig::parse)
        .transpose()
        .map_err(|e| anyhow!(e))?;
    let publishers = kv_events::start(
        kv_cfg.as_ref(),
        args.kv_events_config.as_deref(),
        &args.host,
        args.dp_size,
        args.kv_events_format,
    )
    .await
    .map_err(|e| anyhow!(e))?;
    let metrics =
        Arc::new(metrics::MockMetrics::new(args.model_name()).context("metrics registry")?);
    let limits = Limits {
        page_size: args.page_size,
        total_tokens: args.max_total_tokens,
        max_running: args.max_running(),
        max_prefill_tokens: args.max_prefill_tokens,
        chunk_size: args.chunk_size().map(|c| c.max(args.page_size)),
        timing: args.timing(),
        policy: args.schedule_policy,
    };
    let version: Arc<str> = Arc::from(args.weight_version.as_str());
    let allocating = std::time::Instant::now();
    let ranks: Vec<_> = publishers
        .per_rank
        .into_iter()
        .enumerate()
        .map(|(r, publisher)| {
            let sched = Scheduler::new(r as u32, limits.clone(), version.clone());
            let sched = engine::tiers::configure(sched, &args, kv_cfg.as_ref());
            engine::rank::spawn(
                sched,
                r as u32,
                args.page_size,
                args.speedup,
                publisher,
                metrics.clone(),
            )
        })
        .collect();
    let kv_cache_allocation = allocating.elapsed();
    let load_range = load::resolve_reported(
        publishers.reported_config.as_deref(),
        args.dp_size,
        args.load_publish_endpoint.as_deref(),
    )
    .map_err(|e| anyhow!(e))?;
    if let Some(range) = &load_range {
        load::start(range, &args, &ranks).await;
    }
    let listener = bind_with_backlog((args.host.as_str(), args.port), LISTEN_BACKLOG)
        .await
        .with_context(|| format!("bind {}:{}", args.host, args.port))?;
    let addr = listener.local_addr()?;
    let pd = pd::state::start(&args).await?;
    let kv_events_config = publishers.reported_config.clone();
    let launch = Launch::new(
        args.seed,
        load_weight,
        kv_cache_allocation,
        launched.elapsed(),
    );
    let state = Arc::new(MockState::new(
        args,
        ranks,
        metrics,
        publishers.reported_config,
        addr.port(),
        launch,
        pd,
    ));
    let server = tokio::spawn(http::serve(listener, state));
    Ok(RunningMock {
        url: format!("http://{addr}"),
        kv_events_config,
        server,
    })
}

/// Starts the mock, prints `listening on http://HOST:PORT` (flushed), then serves until
/// the accept loop ends.
pub async fn run(args: MockArgs) -> anyhow::Result<()> {
    let mock = start(args).await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {}", mock.url)?;
        out.flush()?;
    }
    mock.server.await.context("HTTP server task")?;
    Ok(())
}

/// uvicorn's default listen backlog, which SGLang's HTTP server keeps (`uvicorn.run` without
/// `backlog`); tokio's `TcpListener::bind` would give 1024. The kernel caps it at somaxconn.
const LISTEN_BACKLOG: u32 = 2048;
