//! The `loadgen` command line: clap arguments -> `LoadgenConfig`, then run and
//! emit the table / JSON summary. The binary only calls [`execute`].

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;

use super::config::{
    AgentConfig, Endpoint, GrpoConfig, LoadgenConfig, RolloutConfig, TenantsConfig, TraceConfig,
    UrlPick, Workload,
};

/// Drive an SGLang / OpenAI endpoint with GRPO, rollout, agent, tenants or trace
/// workloads and report latency, throughput and prefix-cache hit rate.
#[derive(Debug, Parser)]
#[command(name = "loadgen", version)]
pub struct Cli {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(subcommand)]
    pub workload: WorkloadArgs,
}

/// Options of every workload (accepted before or after the workload name).
#[derive(Debug, Args)]
pub struct CommonArgs {
    /// Base URL (loopback only); repeat or comma-separate to spread requests over several.
    #[arg(
        long = "url",
        global = true,
        value_delimiter = ',',
        default_value = "http://127.0.0.1:30000"
    )]
    pub urls: Vec<String>,
    /// How requests pick a URL: in turn, or by GRPO group / agent session / trace conversation.
    #[arg(long, global = true, value_enum, default_value_t = UrlPickArg::RoundRobin)]
    pub url_pick: UrlPickArg,
    /// Route [default: chat for agent, generate otherwise].
    #[arg(long, global = true, value_enum)]
    pub endpoint: Option<EndpointArg>,
    /// Stream responses (SSE); TTFT is then the first data chunk.
    #[arg(long, global = true)]
    pub stream: bool,
    /// Output tokens per request [default: grpo and tenants 128, agent 64; trace: each entry's own, capped by this; rollout: cap of each sample's drawn length, 4096].
    #[arg(long, global = true, visible_alias = "output-len")]
    pub max_new_tokens: Option<u32>,
    /// Requests in flight at most, over all URLs.
    #[arg(long, global = true, default_value_t = 64)]
    pub concurrency: u32,
    /// Sent as `Authorization: Bearer <key>`.
    #[arg(long, global = true, env = "LOADGEN_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Per-request timeout in seconds.
    #[arg(long, global = true, default_value_t = 600.0)]
    pub timeout_secs: f64,
    /// Bound of the whole run in seconds (in-flight requests are cancelled at it).
    #[arg(long, global = true, default_value_t = 300.0)]
    pub max_duration_secs: f64,
    /// Seed of every generated token and sampling seed.
    #[arg(long, global = true, default_value_t = 0)]
    pub seed: u64,
    /// `model` field of chat requests.
    #[arg(long, global = true, default_value = "default")]
    pub model: String,
    /// Do not ask for logprobs (miles asks for them).
    #[arg(long, global = true)]
    pub no_logprob: bool,
    /// Write one JSON line per request to this file.
    #[arg(long, global = true, value_name = "FILE")]
    pub records: Option<PathBuf>,
    /// Write the summary as JSON to this file.
    #[arg(long, global = true, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// What to print on stdout.
    #[arg(long, global = true, value_enum, default_value_t = OutputArg::Table)]
    pub output: OutputArg,
    /// The fleet runs S times faster than real time (`sglang-mock --speedup S`): sleeps
    /// are divided by S, reported durations multiplied by S.
    #[arg(long, global = true, default_value_t = 1.0, value_name = "S")]
    pub sim_speedup: f64,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum UrlPickArg {
    RoundRobin,
    Sticky,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum EndpointArg {
    Generate,
    Chat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputArg {
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum WorkloadArgs {
    /// G prompt groups x N identical samples fired at once (miles' n_samples_per_prompt).
    Grpo(GrpoArgs),
    /// S concurrent multi-turn sessions resending their whole context each turn.
    Agent(AgentArgs),
    /// Replay of a Mooncake-format JSONL trace.
    Trace(TraceArgs),
    /// miles-shaped GRPO rollout batches: prompts x samples per batch, batch after batch.
    Rollout(RolloutArgs),
    /// Multi-tenant traffic: Zipf-popular tenant system prompts, Poisson arrivals.
    Tenants(TenantsArgs),
    /// The embedded demo: a simulated fleet, the router per mode, GRPO + agent load, one table.
    Demo(DemoArgs),
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// A seconds-long smoke run (2 workers, tiny workloads, no simulated waiting).
    #[arg(long)]
    pub tiny: bool,
    /// Simulated workers per fleet [default: 8; tiny: 2] (`[demo.default]` / `[demo.tiny]` of
    /// workloads/presets.toml).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Router modes to compare, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "kv,least-load")]
    pub modes: Vec<String>,
}

#[derive(Debug, Args)]
pub struct GrpoArgs {
    /// Prompt groups (G).
    #[arg(long, default_value_t = 8)]
    pub groups: u32,
    /// Samples per group (N).
    #[arg(long, default_value_t = 8)]
    pub samples: u32,
    /// Prompt length in tokens, shared prefix included.
    #[arg(long, default_value_t = 1024)]
    pub prompt_len: u32,
    /// Leading tokens shared by every group.
    #[arg(long, default_value_t = 256)]
    pub system_prefix_len: u32,
    /// Groups in flight at once.
    #[arg(long, default_value_t = 2)]
    pub groups_in_flight: u32,
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Concurrent sessions (S).
    #[arg(long, default_value_t = 8)]
    pub sessions: u32,
    /// Turns per session (T).
    #[arg(long, default_value_t = 4)]
    pub turns: u32,
    /// Leading tokens shared by every session.
    #[arg(long, default_value_t = 512)]
    pub system_prefix_len: u32,
    /// Session-specific first prompt after the shared prefix.
    #[arg(long, default_value_t = 256)]
    pub first_prompt_len: u32,
    /// New tool-output tokens appended after every turn.
    #[arg(long, default_value_t = 128)]
    pub tool_output_len: u32,
    /// Simulated tool time between turns, ms (fixed part of the wait).
    #[arg(long, default_value_t = 0)]
    pub tool_latency_ms: u64,
    /// Mean exponential think time between turns, ms (added to the tool time).
    #[arg(long, default_value_t = 0.0)]
    pub think_time_ms: f64,
    /// Send OpenAI messages only (no `input_ids`): the server tokenizes the text (chat endpoint).
    #[arg(long)]
    pub text: bool,
}

#[derive(Debug, Args)]
pub struct RolloutArgs {
    /// Prompts per batch.
    #[arg(long, default_value_t = 256)]
    pub prompts: u32,
    /// Samples per prompt: identical requests fired together.
    #[arg(long, default_value_t = 8)]
    pub samples: u32,
    /// Batches, each starting when the previous one has ended.
    #[arg(long, default_value_t = 2)]
    pub batches: u32,
    /// Shortest prompt, tokens (lengths are uniform in min..=max).
    #[arg(long, default_value_t = 1024)]
    pub prompt_len_min: u32,
    /// Longest prompt, tokens.
    #[arg(long, default_value_t = 8192)]
    pub prompt_len_max: u32,
    /// Leading tokens shared by every prompt.
    #[arg(long, default_value_t = 0)]
    pub system_prefix_len: u32,
    /// Median output length, tokens (lognormal per sample, capped by --max-new-tokens).
    #[arg(long, default_value_t = 400.0)]
    pub output_len_median: f64,
    /// Sigma of the log of the output length.
    #[arg(long, default_value_t = 1.0)]
    pub output_len_sigma: f64,
    /// Before each group's samples, send its prompt once with max_new_tokens 0 and wait for
    /// it, as SGLang does for one request with n > 1 (it caches the common prefix first), so
    /// the samples are not prefilled side by side in one batch.
    #[arg(long)]
    pub prime_prefix: bool,
}

#[derive(Debug, Args)]
pub struct TenantsArgs {
    /// Tenants, each with its own system prompt.
    #[arg(long, default_value_t = 128)]
    pub tenants: u32,
    /// Shortest tenant system prompt, tokens (uniform in min..=max).
    #[arg(long, default_value_t = 2048)]
    pub system_len_min: u32,
    /// Longest tenant system prompt, tokens.
    #[arg(long, default_value_t = 8192)]
    pub system_len_max: u32,
    /// Zipf exponent of tenant popularity (0 = uniform).
    #[arg(long, default_value_t = 1.0)]
    pub zipf_s: f64,
    /// User suffix tokens, unique to each request.
    #[arg(long, default_value_t = 256)]
    pub suffix_len: u32,
    /// Poisson arrival rate, requests per second of simulated time.
    #[arg(long, default_value_t = 20.0)]
    pub rate: f64,
    /// Requests in all.
    #[arg(long, default_value_t = 2000)]
    pub requests: u32,
    /// Send `X-SMG-Routing-Key: tenant-<n>` with each request.
    #[arg(long)]
    pub routing_key: bool,
}

#[derive(Debug, Args)]
pub struct TraceArgs {
    /// Mooncake-format JSONL trace.
    #[arg(long, value_name = "FILE")]
    pub file: PathBuf,
    /// Tokens per trace hash id.
    #[arg(long, default_value_t = 512)]
    pub trace_block_size: u32,
    /// Timestamp multiplier: 0.01 replays 100x faster, 0 sends at once.
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Replay at most this many (leading) entries.
    #[arg(long, default_value_t = 1000)]
    pub max_requests: usize,
}

impl Cli {
    /// The run configuration these arguments describe.
    pub fn config(&self) -> LoadgenConfig {
        let c = &self.common;
        let workload = match &self.workload {
            WorkloadArgs::Grpo(g) => Workload::Grpo(GrpoConfig {
                groups: g.groups,
                samples: g.samples,
                prompt_len: g.prompt_len,
                system_prefix_len: g.system_prefix_len,
                groups_in_flight: g.groups_in_flight,
            }),
            WorkloadArgs::Agent(a) => Workload::Agent(AgentConfig {
                sessions: a.sessions,
                turns: a.turns,
                system_prefix_len: a.system_prefix_len,
                first_prompt_len: a.first_prompt_len,
                tool_output_len: a.tool_output_len,
                tool_latency_ms: a.tool_latency_ms,
                think_time_ms: a.think_time_ms,
            }),
            WorkloadArgs::Trace(t) => Workload::Trace(TraceConfig {
                file: t.file.clone(),
                block_size: t.trace_block_size,
                time_scale: t.time_scale,
                max_requests: t.max_requests,
            }),
            WorkloadArgs::Rollout(r) => Workload::Rollout(RolloutConfig {
                prompts: r.prompts,
                samples: r.samples,
                batches: r.batches,
                prompt_len_min: r.prompt_len_min,
                prompt_len_max: r.prompt_len_max,
                system_prefix_len: r.system_prefix_len,
                output_len_median: r.output_len_median,
                output_len_sigma: r.output_len_sigma,
                prime_prefix: r.prime_prefix,
            }),
            WorkloadArgs::Tenants(t) => Workload::Tenants(TenantsConfig {
                tenants: t.tenants,
                system_len_min: t.system_len_min,
                system_len_max: t.system_len_max,
                zipf_s: t.zipf_s,
                suffix_len: t.suffix_len,
                rate: t.rate,
                requests: t.requests,
                routing_key: t.routing_key,
            }),
            // The demo builds its own per-workload configurations (see `execute`).
            WorkloadArgs::Demo(_) => Workload::Grpo(GrpoConfig::default()),
        };
        LoadgenConfig {
            urls: c.urls.clone(),
            url_pick: match c.url_pick {
                UrlPickArg::RoundRobin => UrlPick::RoundRobin,
                UrlPickArg::Sticky => UrlPick::Sticky,
            },
            endpoint: match (&self.workload, c.endpoint) {
                (WorkloadArgs::Agent(a), None | Some(EndpointArg::Chat)) if a.text => {
                    Some(Endpoint::ChatText)
                }
                (_, e) => e.map(|e| match e {
                    EndpointArg::Generate => Endpoint::Generate,
                    EndpointArg::Chat => Endpoint::Chat,
                }),
            },
            stream: c.stream,
            max_new_tokens: c.max_new_tokens,
            concurrency: c.concurrency,
            api_key: c.api_key.clone(),
            timeout_secs: c.timeout_secs,
            max_duration_secs: c.max_duration_secs,
            seed: c.seed,
            model: c.model.clone(),
            return_logprob: !c.no_logprob,
            records_path: c.records.clone(),
            sim_speedup: c.sim_speedup,
            workload,
        }
    }
}

/// Runs the command: prints the table (or JSON) on stdout and writes `--json`.
/// Ctrl-C (SIGINT) stops the run early; the summary of what ran is still printed.
/// Exit code 0 when at least one request succeeded, 3 when none did (clap uses 2
/// for usage errors, the binary 1 for configuration and I/O errors).
/// The `demo` subcommand runs through [`crate::demo::execute`] (the binary dispatches it).
pub async fn execute(cli: Cli) -> anyhow::Result<ExitCode> {
    if let WorkloadArgs::Demo(_) = &cli.workload {
        anyhow::bail!("the demo runs through kvrouter_sim::demo::execute");
    }
    let stop = CancellationToken::new();
    cancel_on_interrupt(stop.clone()).context("cannot listen for SIGINT")?;
    let (summary, _) = super::run_until(cli.config(), stop).await?;
    let json = serde_json::to_string_pretty(&summary)?;
    if let Some(path) = &cli.common.json {
        std::fs::write(path, format!("{json}\n"))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    match cli.common.output {
        OutputArg::Table => print!("{}", summary.render_table()),
        OutputArg::Json => println!("{json}"),
    }
    Ok(if summary.requests.ok > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}

/// Cancels `stop` on SIGINT. The handler is in place when this returns, so an
/// interrupt can never hit the default action (killing the process unreported).
#[cfg(unix)]
fn cancel_on_interrupt(stop: CancellationToken) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigint = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        if sigint.recv().await.is_some() {
            eprintln!("loadgen: interrupted; cancelling requests in flight");
            stop.cancel();
        }
    });
    Ok(())
}

#[cfg(not(unix))]
fn cancel_on_interrupt(stop: CancellationToken) -> std::io::Result<()> {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("loadgen: interrupted; cancelling requests in flight");
            stop.cancel();
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> LoadgenConfig {
        let mut all = vec!["loadgen"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).unwrap().config()
    }

    #[test]
    fn defaults_build_a_valid_config() {
        let c = parse(&["grpo"]);
        assert_eq!(c.urls, vec!["http://127.0.0.1:30000"]);
        assert_eq!(c.workload, Workload::Grpo(GrpoConfig::default()));
        assert!(c.validate().is_ok());
        let c = parse(&["agent"]);
        assert_eq!(c.workload, Workload::Agent(AgentConfig::default()));
        assert_eq!(c.endpoint(), Endpoint::Chat);
    }

    #[test]
    fn common_options_go_before_or_after_the_workload() {
        let c = parse(&[
            "--url",
            "http://127.0.0.1:1",
            "--url",
            "http://127.0.0.1:2,http://127.0.0.1:3",
            "agent",
            "--endpoint",
            "generate",
            "--stream",
            "--sessions",
            "3",
            "--seed",
            "9",
            "--no-logprob",
        ]);
        assert_eq!(
            c.urls,
            vec![
                "http://127.0.0.1:1",
                "http://127.0.0.1:2",
                "http://127.0.0.1:3"
            ]
        );
        let after = parse(&["grpo", "--url", "http://127.0.0.1:4"]);
        assert_eq!(after.urls, vec!["http://127.0.0.1:4"]);
        assert_eq!(c.endpoint(), Endpoint::Generate);
        assert!(c.stream && !c.return_logprob);
        assert_eq!(c.seed, 9);
        let Workload::Agent(a) = c.workload else {
            panic!("agent")
        };
        assert_eq!(a.sessions, 3);
    }

    #[test]
    fn trace_options() {
        let c = parse(&[
            "trace",
            "--file",
            "t.jsonl",
            "--trace-block-size",
            "16",
            "--time-scale",
            "0.01",
            "--max-requests",
            "5",
            "--output-len",
            "32",
        ]);
        assert_eq!(c.max_new_tokens, Some(32));
        assert_eq!(
            c.workload,
            Workload::Trace(TraceConfig {
                file: "t.jsonl".into(),
                block_size: 16,
                time_scale: 0.01,
                max_requests: 5,
            })
        );
    }

    #[test]
    fn rollout_and_tenants_take_the_contract_flags() {
        let c = parse(&[
            "rollout",
            "--prompts",
            "256",
            "--samples",
            "8",
            "--batches",
            "2",
            "--prompt-len-min",
            "1024",
            "--prompt-len-max",
            "8192",
            "--system-prefix-len",
            "0",
            "--output-len-median",
            "400",
            "--output-len-sigma",
            "1.0",
            "--max-new-tokens",
            "4096",
            "--concurrency",
            "128",
            "--sim-speedup",
            "10",
        ]);
        assert_eq!(c.workload, Workload::Rollout(RolloutConfig::default()));
        assert_eq!(
            (c.concurrency, c.max_new_tokens(), c.sim_speedup),
            (128, 4096, 10.0)
        );
        assert!(c.validate().is_ok());
        let c = parse(&[
            "tenants",
            "--tenants",
            "128",
            "--system-len-min",
            "2048",
            "--system-len-max",
            "8192",
            "--zipf-s",
            "1.0",
            "--suffix-len",
            "256",
            "--rate",
            "20",
            "--requests",
            "2000",
        ]);
        assert_eq!(c.workload, Workload::Tenants(TenantsConfig::default()));
        assert_eq!((c.max_new_tokens(), c.sim_speedup), (128, 1.0));
        let c = parse(&[
            "agent",
            "--think-time-ms",
            "1500",
            "--tool-latency-ms",
            "20",
        ]);
        let Workload::Agent(a) = c.workload else {
            panic!("agent")
        };
        assert_eq!((a.think_time_ms, a.tool_latency_ms), (1500.0, 20));
    }

    #[test]
    fn a_workload_is_required() {
        assert!(Cli::try_parse_from(["loadgen"]).is_err());
        assert!(
            Cli::try_parse_from(["loadgen", "trace"]).is_err(),
            "--file is required"
        );
    }
}
