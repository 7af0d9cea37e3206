//! Command-line configuration of `sglang-mock`, mirroring SGLang's `ServerArgs` names,
//! plus the parsed `--kv-events-config` JSON, the schedule policy and the timing model.

use clap::Parser;
use serde::{Deserialize, Serialize};

use crate::mock::engine::{Roofline, SchedulePolicy, TimingModel};

/// `sglang-mock` command line (flag names as SGLang's `launch_server`).
#[derive(Parser, Debug, Clone)]
#[command(
    name = "sglang-mock",
    about = "A simulated SGLang server (HTTP + KV events)"
)]
pub struct MockArgs {
    /// Address to bind (HTTP, and ZMQ endpoints given as `tcp://*:PORT`).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// HTTP port; 0 binds an ephemeral port (announced on stdout).
    #[arg(long, default_value_t = 30000)]
    pub port: u16,
    /// Tokens per KV page (radix-tree and event granularity).
    #[arg(long, default_value_t = 16)]
    pub page_size: usize,
    /// KV-event publishing, same JSON as SGLang (`{"publisher":"zmq","endpoint":...}`).
    #[arg(long)]
    pub kv_events_config: Option<String>,
    /// KV capacity in tokens per DP rank.
    #[arg(long, default_value_t = 65536)]
    pub max_total_tokens: usize,
    /// Running requests per DP rank (default 256). `/server_info` reports
    /// `max_running_requests` as given (null when not), as SGLang does, and the limit in force
    /// as `internal_states[i].effective_max_running_requests_per_dp`.
    #[arg(long)]
    pub max_running_requests: Option<usize>,
    /// Prefill token budget per batch.
    #[arg(long, default_value_t = 16384)]
    pub max_prefill_tokens: usize,
    /// Chunk size for chunked prefill (-1 or 0 disables chunking).
    #[arg(long, default_value_t = 8192, allow_hyphen_values = true)]
    pub chunked_prefill_size: i64,
    /// Model context length (prompt + output); capped by `--max-total-tokens`.
    #[arg(long, default_value_t = 32768)]
    pub context_length: usize,
    /// Data-parallel ranks, each with its own scheduler, cache and event publisher.
    #[arg(long, default_value_t = 1)]
    pub dp_size: usize,
    /// Tensor-parallel size (the number of GPUs per rank reported in `/server_info`).
    #[arg(long, default_value_t = 1)]
    pub tp_size: usize,
    /// How requests without `routed_dp_rank` pick a rank: `round_robin` or `shortest_queue`.
    #[arg(long, default_value = "round_robin")]
    pub load_balance_method: String,
    /// Model path reported by `/model_info` and `/server_info`.
    #[arg(long, default_value = "mock-model")]
    pub model_path: String,
    /// Real-tokenizer mode: a model directory (`tokenizer.json` + chat template) or a
    /// `tokenizer.json` used for text prompts, chat messages and output text instead of the
    /// stand-in (`--vocab-size` must then stay within its regular vocabulary).
    #[arg(long)]
    pub tokenizer_path: Option<std::path::PathBuf>,
    /// Model name reported by `/v1/models` (defaults to `--model-path`).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Initial weight version.
    #[arg(long, default_value = "default")]
    pub weight_version: String,
    /// Divides every simulated duration; 0 = never wait.
    #[arg(long, default_value_t = 1.0)]
    pub speedup: f64,
    /// SGLang's `--random-seed`: seeds the pseudo-token generator (0 when unset, so output
    /// stays deterministic) and is reported as `/server_info.random_seed`; when unset the
    /// report is drawn per launch, as SGLang draws it (`arg_groups/serving_hook.py`,
    /// `random.randint(0, 1 << 30)`), so a relaunch behind the same URL is told apart.
    #[arg(long, visible_alias = "random-seed")]
    pub seed: Option<u64>,
    /// Require `Authorization: Bearer KEY` on every route.
    #[arg(long)]
    pub api_key: Option<String>,
    /// Seconds after start during which `/health` answers 503 (warm-up).
    #[arg(long, default_value_t = 0.0)]
    pub warmup_secs: f64,
    /// Vocabulary size of the tokenizer stand-in and the pseudo-token generator.
    #[arg(long, default_value_t = 32000)]
    pub vocab_size: u32,
    /// Prefill cost polynomial `a,b,c`: ms = a*t^2 + b*t + c, t = uncached tokens in the batch.
    #[arg(long, default_value = "4.209989e-7,1.518344e-2,16.50142", value_parser = parse_coeffs)]
    pub prefill_coeffs: [f64; 3],
    /// Decode cost polynomial `a,b,c`: ms = max(1, a*u^2 + b*u + c), u = KV utilisation.
    #[arg(long, default_value = "-25.74,54.01,5.74", value_parser = parse_coeffs)]
    pub decode_coeffs: [f64; 3],
    /// Step-time model: `poly` (the two polynomials above) or `roofline` (decode time from
    /// batch size and context tokens, prefill from new tokens and attended pairs).
    #[arg(long, default_value = "poly", value_parser = ["poly", "roofline"])]
    pub timing_model: String,
    /// Roofline decode `base,per_req,per_ctx_token`: ms = base + per_req*batch +
    /// per_ctx_token*context tokens of the running batch.
    #[arg(long, default_value = "6.0,0.04,4.4e-5", value_parser = parse_coeffs)]
    pub roofline_decode_coeffs: [f64; 3],
    /// Roofline prefill `base,per_token,attn`: ms = base + per_token*new +
    /// attn*sum(new*(prefix+new/2)).
    #[arg(long, default_value = "8.0,0.023,1.3e-6", value_parser = parse_coeffs)]
    pub roofline_prefill_coeffs: [f64; 3],
    /// Waiting-queue order: `fcfs` (SGLang's default) or `lpm` (longest prefix match).
    #[arg(long, default_value = "fcfs", value_parser = parse_policy)]
    pub schedule_policy: SchedulePolicy,
    /// Test hook: every weight-update call fails with `{"success":false}`.
    #[arg(long)]
    pub fail_weight_updates: bool,
    /// Seconds an idle keep-alive connection stays open after a response (SGLang:
    /// `SGLANG_TIMEOUT_KEEP_ALIVE`, default 5, passed to uvicorn as `timeout_keep_alive` in
    /// `python/sglang/srt/entrypoints/http_server.py`; also bounds how long a request head may
    /// take, as uvicorn's does).
    #[arg(long, env = "SGLANG_TIMEOUT_KEEP_ALIVE", default_value_t = 5.0)]
    pub timeout_keep_alive: f64,
    /// Tokio worker threads (HTTP and schedulers share them).
    #[arg(long, default_value_t = 2)]
    pub worker_threads: usize,

    // --- SGLang version shape and load publisher (docs/mock.md "Server info", "Load") ---
    /// Which SGLang the info routes imitate: `0.5.23` (its `/server_info` with the `kv_events`
    /// block, `/v1/loads` as `entrypoints/v1_loads.py`, no `/get_load`) or `0.5.9` (the older
    /// 34-key `/server_info` and `/get_load`).
    #[arg(long, default_value = "0.5.23", value_parser = ["0.5.23", "0.5.9"])]
    pub sglang_version: String,
    /// SGLang's `--load-publish-endpoint`: unset or `off` (default), `auto` (the ports after
    /// the KV-event range, past the replay range), or a wildcard-host `tcp://*:PORT`; rank `r`
    /// binds base + r and publishes `LoadStat` (`managers/scheduler_components/load_publisher.py`).
    #[arg(long)]
    pub load_publish_endpoint: Option<String>,

    /// KV-event shape: `tagged` (SGLang 0.5.23: msgspec tagged maps, merged events,
    /// 4-frame replay answers) or `positional` (SGLang 0.5.9: arrays, one event per
    /// page, 3-frame replay answers).
    #[arg(long, default_value = "tagged")]
    pub kv_events_format: EventFormat,

    // --- Namespaces and HiCache (docs/mock.md "Namespaces", "HiCache host tier") ---
    /// SGLang's `--enable-lora`: requests may name an adapter (`lora_path`); implied by
    /// `--lora-paths`.
    #[arg(long)]
    pub enable_lora: bool,
    /// SGLang's `--lora-paths NAME=PATH ...` (or `PATH`, named by itself): the adapters a
    /// request's `lora_path` (or OpenAI `model` `base:NAME`) may name. Each adapter's
    /// `lora_id` is `uuid5(NAMESPACE_URL, "NAME\0PATH").hex` (`LoRARef.deterministic_id`).
    #[arg(long, num_args = 1..)]
    pub lora_paths: Vec<String>,
    /// SGLang's `--enable-hierarchical-cache` (`--enable-hicache`): a host tier behind the
    /// GPU cache.
    #[arg(long, visible_alias = "enable-hicache")]
    pub enable_hierarchical_cache: bool,
    /// SGLang's `--hicache-ratio`: host pool size / device pool size (default 2.0).
    #[arg(long)]
    pub hicache_ratio: Option<f64>,
    /// SGLang's `--hicache-write-policy`: `write_through` (default; every new node is backed
    /// up) or `write_back` (backed up when evicted from the GPU).
    #[arg(long, default_value = "write_through", value_parser = ["write_through", "write_back"])]
    pub hicache_write_policy: String,
    /// Mock only: a host-tier load-back costs this fraction of recomputing the tokens.
    #[arg(long, default_value_t = 0.1)]
    pub hicache_load_cost: f64,

    // --- PD disaggregation (docs/mock.md "PD disaggregation", `crate::mock::pd`) ---
    /// SGLang's `--disaggregation-mode`: `null` (aggregated, the default), `prefill` or
    /// `decode`.
    #[arg(long, default_value = "null", value_parser = ["null", "prefill", "decode"])]
    pub disaggregation_mode: String,
    /// SGLang's `--disaggregation-bootstrap-port` (default 8998): the prefill role's bootstrap
    /// listener; a decode uses it for requests whose `bootstrap_port` is null. 0 binds an
    /// ephemeral port (reported as `disaggregation_bootstrap_port` in `/server_info`).
    #[arg(long, default_value_t = 8998)]
    pub disaggregation_bootstrap_port: u16,
    /// SGLang's `--disaggregation-decode-enable-radix-cache`: the decode role keeps a radix
    /// cache (matches its own tree, receives only the delta KV, publishes KV events).
    #[arg(long)]
    pub disaggregation_decode_enable_radix_cache: bool,
    /// Mock only: the simulated KV link between prefill and decode, in GB/s (10^9 bytes/s).
    /// Default 25: one 200 Gb/s RDMA NIC at line rate.
    #[arg(long, default_value_t = 25.0)]
    pub disaggregation_link_gbps: f64,
    /// Mock only: KV bytes per token moved by a transfer (default 131072: the 8B model of
    /// docs/mock.md "Timing", 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes).
    #[arg(long, default_value_t = 131072)]
    pub disaggregation_kv_bytes_per_token: u64,
    /// Seconds a prefill waits for the decode peer of a room (SGLang
    /// `SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT`, 300).
    #[arg(
        long,
        env = "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT",
        default_value_t = 300.0
    )]
    pub disaggregation_bootstrap_timeout: f64,
    /// Seconds a decode waits for its KV after registering (SGLang
    /// `SGLANG_DISAGGREGATION_WAITING_TIMEOUT`, 300).
    #[arg(
        long,
        env = "SGLANG_DISAGGREGATION_WAITING_TIMEOUT",
        default_value_t = 300.0
    )]
    pub disaggregation_waiting_timeout: f64,
}

/// SGLang's default `--hicache-ratio` for the `cache` host memory mode
/// (`arg_groups/hicache_hook.py::handle_hicache_ratio_default`).
pub const DEFAULT_HICACHE_RATIO: f64 = 2.0;

/// The running-request limit when `--max-running-requests` is not given (what SGLang 0.5.23
/// reported as `effective_max_running_requests_per_dp` for its dummy model).
pub const DEFAULT_MAX_RUNNING: usize = 256;

fn parse_coeffs(s: &str) -> Result<[f64; 3], String> {
    let parts: Vec<f64> = s
        .split(',')
        .map(|p| p.trim().parse::<f64>().map_err(|e| format!("{p:?}: {e}")))
        .collect::<Result<_, _>>()?;
    parts
        .try_into()
        .map_err(|_| "expected three comma-separated numbers a,b,c".to_string())
}

fn parse_policy(s: &str) -> Result<SchedulePolicy, String> {
    s.parse()
}

impl MockArgs {
    /// The step-time model the flags select.
    pub fn timing(&self) -> TimingModel {
        match self.timing_model.as_str() {
            "roofline" => TimingModel::Roofline(Roofline {
                decode: self.roofline_decode_coeffs,
                prefill: self.roofline_prefill_coeffs,
            }),
            _ => TimingModel::Poly {
                prefill: self.prefill_coeffs,
                decode: self.decode_coeffs,
            },
        }
    }

    /// Checks cross-field constraints; returns a message naming the bad flag. The LoRA and PD
    /// flags are checked by their own modules (`lora::Adapters::from_args`,
    /// `pd::state::validate_args`), which `mock::start` runs after this.
    pub fn validate(&self) -> Result<(), String> {
        if self.page_size == 0 {
            return Err("--page-size must be at least 1".into());
        }
        if self.dp_size == 0 {
            return Err("--dp-size must be at least 1".into());
        }
        if self.max_total_tokens < self.page_size * 2 {
            return Err("--max-total-tokens must hold at least two pages".into());
        }
        if self.max_running_requests == Some(0) {
            return Err("--max-running-requests must be at least 1".into());
        }
        if self.vocab_size < 512 {
            return Err("--vocab-size must be at least 512".into());
        }
        if !(self.timeout_keep_alive.is_finite() && self.timeout_keep_alive > 0.0) {
            return Err("--timeout-keep-alive must be a positive number of seconds".into());
        }
        if self.speedup.is_nan() || self.speedup < 0.0 || !self.speedup.is_finite() {
            return Err("--speedup must be a finite number >= 0".into());
        }
        if !matches!(
            self.load_balance_method.as_str(),
            "round_robin" | "shortest_queue"
        ) {
            return Err("--load-balance-method must be round_robin or shortest_queue".into());
        }
        if let Some(cfg) = &self.kv_events_config {
            KvEventsConfig::parse(cfg)?;
        }
        if let Some(r) = self.hicache_ratio {
            if !(r.is_finite() && r > 0.0) {
                return Err("--hicache-ratio must be a positive number".into());
            }
        }
        if !(self.hicache_load_cost.is_finite() && self.hicache_load_cost >= 0.0) {
            return Err("--hicache-load-cost must be a number >= 0".into());
        }
        Ok(())
    }

    /// The model name `/v1/models` reports.
    pub fn model_name(&self) -> &str {
        self.served_model_name
            .as_deref()
            .unwrap_or(&self.model_path)
    }

    /// Context length actually enforced: `--context-length` capped by the KV capacity.
    pub fn effective_context_length(&self) -> usize {
        self.context_length.min(self.max_total_tokens)
    }

    /// The running-request limit in force per rank (`--max-running-requests`, default 256).
    pub fn max_running(&self) -> usize {
        self.max_running_requests.unwrap_or(DEFAULT_MAX_RUNNING)
    }

    /// Seed of the pseudo-token generator: `--seed`, else 0.
    pub fn sampling_seed(&self) -> u64 {
        self.seed.unwrap_or(0)
    }

    /// True when the info routes imitate SGLang 0.5.9 (`--sglang-version 0.5.9`).
    pub fn legacy_info(&self) -> bool {
        self.sglang_version == "0.5.9"
    }

    /// Chunk size, or `None` when chunked prefill is disabled.
    pub fn chunk_size(&self) -> Option<usize> {
        (self.chunked_prefill_size > 0).then_some(self.chunked_prefill_size as usize)
    }
}

/// The KV events' shape on the wire (`--kv-events-format`; the encoding is
/// `kv_events/encode.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EventFormat {
    /// msgspec tagged maps (SGLang 0.5.23).
    #[default]
    Tagged,
    /// Positional arrays (the shape the mock sent before, SGLang 0.5.9 era).
    Positional,
}

impl std::str::FromStr for EventFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "tagged" => Ok(EventFormat::Tagged),
            "positional" => Ok(EventFormat::Positional),
            other => Err(format!(
                "unknown KV-event format {other:?} (expected tagged or positional)"
            )),
        }
    }
}

/// SGLang's `KVEventsConfig` (unknown keys ignored, defaults as upstream).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct KvEventsConfig {
    pub publisher: String,
    pub endpoint: String,
    pub replay_endpoint: Option<String>,
    pub buffer_steps: usize,
    pub hwm: usize,
    pub max_queue_size: usize,
    pub topic: String,
    /// Bind (true) or connect (false) the PUB socket; unset = SGLang's endpoint heuristic.
    pub bind: Option<bool>,
    /// `default` or `dynamo` (hashes namespaced by salt and any extra_key too).
    pub format: String,
}

impl Default for KvEventsConfig {
    fn default() -> Self {
        KvEventsConfig {
            publisher: "null".into(),
            endpoint: "tcp://*:5557".into(),
            replay_endpoint: None,
            buffer_steps: 10000,
            hwm: 100000,
            max_queue_size: 100000,
            topic: String::new(),
            bind: None,
            format: "default".into(),
        }
    }
}

impl KvEventsConfig {
    /// Parses the `--kv-events-config` JSON.
    pub fn parse(json: &str) -> Result<KvEventsConfig, String> {
        let cfg: KvEventsConfig =
            serde_json::from_str(json).map_err(|e| format!("--kv-events-config: {e}"))?;
        if !matches!(cfg.format.as_str(), "default" | "dynamo") {
            return Err(format!(
                "--kv-events-config: unknown format {:?} (expected \"default\" or \"dynamo\")",
                cfg.format
            ));
        }
        match cfg.publisher.as_str() {
            "null" | "zmq" => Ok(cfg),
            other => Err(format!(
                "--kv-events-config: unknown publisher {other:?} (expected \"zmq\" or \"null\")"
            )),
        }
    }

    /// True when events are published.
    pub fn enabled(&self) -> bool {
        self.publisher == "zmq"
    }

    /// `format == "dynamo"` (`uses_dynamo_format`).
    pub fn dynamo_format(&self) -> bool {
        self.format == "dynamo"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_events_config_defaults_and_unknown_keys() {
        let c = KvEventsConfig::parse(
            r#"{"publisher":"zmq","topic":"kv","enable_kv_cache_events":true}"#,
        )
        .unwrap();
        assert!(c.enabled());
        assert_eq!(c.endpoint, "tcp://*:5557");
        assert_eq!(c.buffer_steps, 10000);
        assert!(KvEventsConfig::parse(r#"{"publisher":"kafka"}"#).is_err());
    }

    #[test]
    fn timing_and_policy_flags() {
        let a = MockArgs::parse_from(["sglang-mock"]);
        assert_eq!(a.schedule_policy, SchedulePolicy::Fcfs);
        assert!(matches!(a.timing(), TimingModel::Poly { .. }));
        let a = MockArgs::parse_from([
            "sglang-mock",
            "--timing-model",
            "roofline",
            "--schedule-policy",
            "lpm",
        ]);
        assert_eq!(a.schedule_policy, SchedulePolicy::Lpm);
        assert_eq!(a.timing(), TimingModel::Roofline(Roofline::default()));
        assert!(MockArgs::try_parse_from(["sglang-mock", "--schedule-policy", "x"]).is_err());
        assert!(MockArgs::try_parse_from(["sglang-mock", "--timing-model", "x"]).is_err());
    }

    #[test]
    fn coefficient_parsing() {
        assert_eq!(parse_coeffs("1,2,3").unwrap(), [1.0, 2.0, 3.0]);
        assert!(parse_coeffs("1,2").is_err());
    }
}
