//! The embedded demo (`loadgen demo`, the README's first command): one process starts a
//! small simulated SGLang fleet, a router in front of it, and the workloads our users run
//! (GRPO sibling bursts, then multi-turn agent sessions), once per routing mode, and prints
//! prefix hit rate, TTFT and throughput side by side.
//!
//! Everything runs in-process on loopback with ephemeral ports: `sglang-mock` engines via
//! [`mock::start`], the router via [`server::start`], the load via [`loadgen::run`]. Each
//! mode gets a fresh fleet (cold caches), and every task it started is aborted before the
//! next mode starts, so nothing outlives the run.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use serde::Serialize;

use crate::loadgen::cli::DemoArgs;
use crate::loadgen::{self, AgentConfig, GrpoConfig, LoadgenConfig, Summary, Workload};
use crate::mock::{self, MockArgs};
use crate::presets;
use kvrouter::config::{Cli as RouterCli, Config, FileConfig};
use kvrouter::server::{self, AppState};

/// What the demo runs: `[demo.default]` of workloads/presets.toml is the README's demo,
/// `[demo.tiny]` ([`DemoConfig::tiny`]) the CI smoke run. The workloads are the table's presets,
/// parsed by loadgen's command line ([`presets`]); the run settings are the demo's own.
#[derive(Debug, Clone, Serialize)]
pub struct DemoConfig {
    /// Simulated SGLang workers per fleet.
    pub workers: usize,
    /// KV capacity of each worker, in tokens.
    pub worker_kv_tokens: usize,
    /// Simulated-time divisor of the mocks (1 = realistic GPU timing).
    pub speedup: f64,
    /// Router modes compared, in order.
    pub modes: Vec<String>,
    pub grpo: GrpoConfig,
    pub grpo_output_tokens: u32,
    pub agent: AgentConfig,
    pub agent_output_tokens: u32,
    pub seed: u64,
    /// Requests in flight at most, per workload run.
    pub concurrency: u32,
    /// Bound of each workload run, seconds.
    pub max_duration_secs: f64,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig::from_presets("default").expect("workloads/presets.toml: [demo.default]")
    }
}

impl DemoConfig {
    /// A seconds-long run for smoke tests (no simulated waiting).
    pub fn tiny() -> DemoConfig {
        DemoConfig::from_presets("tiny").expect("workloads/presets.toml: [demo.tiny]")
    }

    /// `[demo.NAME]` of the embedded workloads/presets.toml, comparing kv with least-load.
    pub fn from_presets(name: &str) -> anyhow::Result<DemoConfig> {
        let table = presets::table()?;
        let d = table.demo(name)?;
        let grpo = table.loadgen_config(&d.grpo)?;
        let agent = table.loadgen_config(&d.agent)?;
        let (Workload::Grpo(g), Some(grpo_output_tokens)) = (grpo.workload, grpo.max_new_tokens)
        else {
            bail!(
                "[demo.{name}]: preset {} is not a grpo workload with --max-new-tokens",
                d.grpo
            );
        };
        let (Workload::Agent(a), Some(agent_output_tokens)) =
            (agent.workload, agent.max_new_tokens)
        else {
            bail!(
                "[demo.{name}]: preset {} is not an agent workload with --max-new-tokens",
                d.agent
            );
        };
        Ok(DemoConfig {
            workers: d.workers,
            worker_kv_tokens: d.worker_kv_tokens,
            speedup: d.speedup,
            modes: vec!["kv".into(), "least-load".into()],
            grpo: g,
            grpo_output_tokens,
            agent: a,
            agent_output_tokens,
            seed: d.seed,
            concurrency: d.concurrency,
            max_duration_secs: d.max_duration_secs,
        })
    }

    /// The loadgen runs of one mode against the router at `url`: GRPO, then agent.
    pub fn loadgen_configs(&self, url: &str) -> Vec<LoadgenConfig> {
        [
            (Workload::Grpo(self.grpo.clone()), self.grpo_output_tokens),
            (
                Workload::Agent(self.agent.clone()),
                self.agent_output_tokens,
            ),
        ]
        .into_iter()
        .map(|(workload, output)| {
            let mut lc = LoadgenConfig::new(vec![url.to_string()], workload);
            lc.stream = true;
            lc.seed = self.seed;
            lc.max_new_tokens = Some(output);
            lc.concurrency = self.concurrency;
            lc.return_logprob = false;
            lc.max_duration_secs = self.max_duration_secs;
            lc
        })
        .collect()
    }
}

/// One (mode, workload) measurement.
#[derive(Debug, Clone, Serialize)]
pub struct DemoRow {
    pub mode: String,
    pub summary: Summary,
}

/// Runs every mode of `cfg` and returns one row per (mode, workload).
pub async fn run(cfg: &DemoConfig) -> anyhow::Result<Vec<DemoRow>> {
    let mut rows = Vec::new();
    for mode in &cfg.modes {
        let fleet = Fleet::start(cfg).await?;
        let result = fleet.run_mode(cfg, mode).await;
        fleet.stop();
        rows.extend(result?);
    }
    Ok(rows)
}

/// Renders the rows as the demo's comparison table.
pub fn render_table(rows: &[DemoRow]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<10} {:<11} {:>9} {:>8} {:>12} {:>12} {:>9} {:>9}\n",
        "workload", "mode", "requests", "failed", "hit rate", "TTFT p50 ms", "p99 ms", "req/s"
    ));
    for r in rows {
        let s = &r.summary;
        let ttft = s.ttft_ms.as_ref();
        out.push_str(&format!(
            "{:<10} {:<11} {:>9} {:>8} {:>11.1}% {:>12.1} {:>9.1} {:>9.1}\n",
            s.workload,
            r.mode,
            s.requests.total,
            s.requests.failed,
            100.0 * s.prefix_hit_rate.unwrap_or(0.0),
            ttft.map_or(0.0, |p| p.p50),
            ttft.map_or(0.0, |p| p.p99),
            s.throughput.requests_per_sec,
        ));
    }
    out
}

/// One fleet of in-process mocks.
struct Fleet {
    urls: Vec<String>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Fleet {
    async fn start(cfg: &DemoConfig) -> anyhow::Result<Fleet> {
        let mut fleet = Fleet {
            urls: Vec::new(),
            tasks: Vec::new(),
        };
        for i in 0..cfg.workers {
            let args = MockArgs::try_parse_from([
                "sglang-mock".to_string(),
                "--host=127.0.0.1".into(),
                "--port=0".into(),
                "--page-size=16".into(),
                format!("--max-total-tokens={}", cfg.worker_kv_tokens),
                format!("--speedup={}", cfg.speedup),
                format!("--seed={}", cfg.seed + i as u64),
                "--context-length=131072".into(),
                r#"--kv-events-config={"publisher":"zmq","endpoint":"tcp://*:0","replay_endpoint":"tcp://*:0"}"#.into(),
            ])
            .context("demo mock arguments")?;
            let m = mock::start(args).await?;
            fleet.urls.push(m.url);
            fleet.tasks.push(m.server);
        }
        Ok(fleet)
    }

    async fn run_mode(&self, cfg: &DemoConfig, mode: &str) -> anyhow::Result<Vec<DemoRow>> {
        let mut argv = vec![
            "router".to_string(),
            "--host=127.0.0.1".into(),
            "--port=0".into(),
            format!("--mode={mode}"),
            "--page-size=16".into(),
            "--log-level=warn".into(),
            // One in-process router per mode: no second listener on the default 29000.
            "--prometheus-port=0".into(),
        ];
        argv.extend(self.urls.iter().map(|u| format!("--worker-urls={u}")));
        let cli = RouterCli::try_parse_from(argv).context("demo router arguments")?;
        let config =
            Config::from_sources(cli, FileConfig::default()).map_err(|e| anyhow::anyhow!("{e}"))?;
        let state = AppState::new(config);
        let started = server::start(state.clone()).await?;
        let url = format!("http://{}", started.addr);
        let result = async {
            wait_ready(&state, self.urls.len()).await?;
            let mut rows = Vec::new();
            for lc in cfg.loadgen_configs(&url) {
                let summary = loadgen::run(lc).await?;
                rows.push(DemoRow {
                    mode: mode.to_string(),
                    summary,
                });
            }
            anyhow::Ok(rows)
        }
        .await;
        started.task.abort();
        result
    }

    fn stop(self) {
        for t in self.tasks {
            t.abort();
        }
    }
}

/// Waits (bounded) until the router has registered all `workers` and sees them routable.
async fn wait_ready(state: &AppState, workers: usize) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut changes = state.registry.watch();
    loop {
        let snapshot = state.registry.snapshot();
        if snapshot.iter().filter(|w| w.is_routable()).count() >= workers {
            return Ok(());
        }
        // Registrations publish a new snapshot; re-check at least every 50 ms for health flips.
        let wait = tokio::time::timeout(Duration::from_millis(50), changes.changed());
        if tokio::time::timeout_at(deadline, wait).await.is_err() {
            bail!("the router did not see {workers} routable workers within 30 s");
        }
    }
}

/// Runs the embedded demo and prints its comparison table (and `--json`).
/// Exit code 0 when no request failed, 3 otherwise (as `loadgen::cli::execute`).
pub async fn execute(args: &DemoArgs, json: Option<&Path>) -> anyhow::Result<ExitCode> {
    let mut cfg = if args.tiny {
        DemoConfig::tiny()
    } else {
        DemoConfig::default()
    };
    if let Some(w) = args.workers {
        cfg.workers = w;
    }
    cfg.modes = args.modes.clone();
    eprintln!(
        "demo: {} simulated SGLang workers, modes {:?}; GRPO {}x{} then agent {}x{} per mode",
        cfg.workers,
        cfg.modes,
        cfg.grpo.groups,
        cfg.grpo.samples,
        cfg.agent.sessions,
        cfg.agent.turns
    );
    let rows = run(&cfg).await?;
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(&rows)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    print!("{}", render_table(&rows));
    let failed: u64 = rows.iter().map(|r| r.summary.requests.failed).sum();
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_help_says_the_preset_tables_worker_counts() {
        use clap::CommandFactory;
        let cmd = crate::loadgen::cli::Cli::command();
        let demo = cmd.find_subcommand("demo").unwrap();
        let workers = demo
            .get_arguments()
            .find(|a| a.get_id() == "workers")
            .unwrap();
        let help = workers.get_help().unwrap().to_string();
        let (default, tiny) = (DemoConfig::default().workers, DemoConfig::tiny().workers);
        assert!(
            help.contains(&format!("[default: {default}; tiny: {tiny}]")),
            "{help}"
        );
    }

    /// The demo's configuration as demo.rs wrote it before workloads/presets.toml (issue 27).
    fn before(tiny: bool) -> DemoConfig {
        let default = DemoConfig {
            workers: 8,
            worker_kv_tokens: 512 * 1024,
            speedup: 1.0,
            modes: vec!["kv".into(), "least-load".into()],
            grpo: GrpoConfig {
                groups: 16,
                samples: 32,
                prompt_len: 4096,
                system_prefix_len: 1024,
                groups_in_flight: 4,
            },
            grpo_output_tokens: 64,
            agent: AgentConfig {
                sessions: 32,
                turns: 6,
                system_prefix_len: 1024,
                first_prompt_len: 1024,
                tool_output_len: 1024,
                tool_latency_ms: 0,
                think_time_ms: 0.0,
            },
            agent_output_tokens: 64,
            seed: 7,
            concurrency: 256,
            max_duration_secs: 600.0,
        };
        if !tiny {
            return default;
        }
        DemoConfig {
            workers: 2,
            worker_kv_tokens: 64 * 1024,
            speedup: 0.0,
            grpo: GrpoConfig {
                groups: 2,
                samples: 4,
                prompt_len: 256,
                system_prefix_len: 64,
                groups_in_flight: 1,
            },
            grpo_output_tokens: 4,
            agent: AgentConfig {
                sessions: 2,
                turns: 2,
                system_prefix_len: 64,
                first_prompt_len: 64,
                tool_output_len: 32,
                tool_latency_ms: 0,
                think_time_ms: 0.0,
            },
            agent_output_tokens: 4,
            ..default
        }
    }

    /// The loadgen runs as run_mode built them before: GRPO then agent, streaming, the demo's
    /// seed, 256 in flight, no logprobs, 600 s each, the endpoint loadgen picks per workload.
    fn before_runs(cfg: &DemoConfig, url: &str) -> Vec<LoadgenConfig> {
        let mut out = Vec::new();
        for (workload, output) in [
            (Workload::Grpo(cfg.grpo.clone()), cfg.grpo_output_tokens),
            (Workload::Agent(cfg.agent.clone()), cfg.agent_output_tokens),
        ] {
            let mut lc = LoadgenConfig::new(vec![url.to_string()], workload);
            lc.stream = true;
            lc.seed = cfg.seed;
            lc.max_new_tokens = Some(output);
            lc.concurrency = 256;
            lc.return_logprob = false;
            lc.max_duration_secs = 600.0;
            out.push(lc);
        }
        out
    }

    #[test]
    fn the_demo_from_the_preset_table_is_the_demo_it_was() {
        for (tiny, cfg) in [(false, DemoConfig::default()), (true, DemoConfig::tiny())] {
            let old = before(tiny);
            assert_eq!(
                serde_json::to_value(&cfg).unwrap(),
                serde_json::to_value(&old).unwrap(),
                "tiny: {tiny}"
            );
            let url = "http://127.0.0.1:1";
            let runs = cfg.loadgen_configs(url);
            assert_eq!(runs, before_runs(&old, url), "tiny: {tiny}");
            assert!(runs.iter().all(|r| r.validate().is_ok()));
        }
    }

    #[test]
    fn an_unknown_demo_preset_is_an_error() {
        let err = DemoConfig::from_presets("nope").unwrap_err().to_string();
        assert!(err.contains("[demo.nope]"), "{err}");
    }
}
