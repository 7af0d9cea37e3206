//! `loadgen`: workloads that look like kvrouter's users (GRPO sibling bursts and
//! rollout batches, multi-turn agent sessions, multi-tenant traffic, Mooncake trace
//! replay) driven against any SGLang / OpenAI endpoint, measured per request and
//! summarised.
//!
//! Library entry points (the `loadgen` binary, the demo and the comparison harness
//! call them in-process): [`run`], [`run_with_records`] and [`run_until`].
//!
//! Flow: `config` -> `workloads::*` plan `request::RequestSpec`s -> `runner` sends
//! them through `client` (`sse` + `response` read the replies) and keeps a
//! `record::RequestRecord` each -> `report::Summary`.

pub mod cli;
pub mod client;
pub mod config;
pub mod dist;
pub mod makespan;
pub mod record;
pub mod report;
pub mod request;
pub mod response;
pub mod runner;
pub mod sse;
pub mod stats;
pub mod synth;
pub mod text_chat;
pub mod workloads;

pub use config::{
    AgentConfig, Endpoint, GrpoConfig, LoadgenConfig, RolloutConfig, TenantsConfig, TraceConfig,
    UrlPick, Workload,
};
pub use record::{RequestRecord, RequestStatus};
pub use report::Summary;

pub use tokio_util::sync::CancellationToken;

use report::RunMeta;
use runner::Runner;

/// Runs `cfg` to completion (or its `max_duration_secs`) and returns the summary;
/// writes the per-request records to `cfg.records_path` when set.
pub async fn run(cfg: LoadgenConfig) -> anyhow::Result<Summary> {
    Ok(run_with_records(cfg).await?.0)
}

/// [`run`], also returning every request's record in dispatch order.
pub async fn run_with_records(cfg: LoadgenConfig) -> anyhow::Result<(Summary, Vec<RequestRecord>)> {
    run_until(cfg, CancellationToken::new()).await
}

/// [`run_with_records`] that also ends early when `stop` is cancelled: nothing new
/// starts and requests in flight are recorded as cancelled.
pub async fn run_until(
    cfg: LoadgenConfig,
    stop: CancellationToken,
) -> anyhow::Result<(Summary, Vec<RequestRecord>)> {
    cfg.validate()?;
    let trace = match &cfg.workload {
        Workload::Trace(t) => workloads::trace::load(&t.file, t.max_requests)?,
        _ => Vec::new(),
    };
    let runner = Runner::new(&cfg, stop)?;
    let seed = cfg.seed;
    let max_new = cfg.max_new_tokens();
    let slots = cfg.concurrency as usize;
    match &cfg.workload {
        Workload::Grpo(g) => workloads::grpo::run(&runner, g, seed, max_new).await,
        Workload::Agent(a) => workloads::agent::run(&runner, a, seed, max_new).await,
        Workload::Trace(t) => workloads::trace::run(&runner, t, &trace, seed, max_new, slots).await,
        Workload::Rollout(r) => workloads::rollout::run(&runner, r, seed, max_new).await,
        Workload::Tenants(t) => workloads::tenants::run(&runner, t, seed, max_new, slots).await,
    }
    let duration_secs = runner.sim_secs(runner.start().elapsed());
    let records = runner.take_records();
    if let Some(path) = &cfg.records_path {
        record::write_jsonl(path, &records)?;
    }
    let meta = RunMeta {
        workload: cfg.workload.name().to_string(),
        endpoint: cfg.endpoint().name().to_string(),
        stream: cfg.stream,
        urls: cfg.urls.clone(),
        seed,
        duration_secs,
    };
    Ok((Summary::from_records(meta, &records), records))
}
