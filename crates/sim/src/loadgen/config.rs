//! `LoadgenConfig`: everything one run needs, independent of how it was built
//! (the CLI, the demo command or the comparison harness), plus its validation.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Which SGLang/OpenAI route requests go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    /// SGLang's native `POST /generate` with `input_ids`.
    Generate,
    /// `POST /v1/chat/completions` with SGLang's `input_ids` extension (as miles' session server).
    Chat,
    /// `POST /v1/chat/completions` with OpenAI messages only, no `input_ids` (`--text`; see
    /// `text_chat`).
    #[serde(rename = "chat_text")]
    ChatText,
}

impl Endpoint {
    /// Request path appended to each base URL.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Generate => "/generate",
            Endpoint::Chat | Endpoint::ChatText => "/v1/chat/completions",
        }
    }

    /// Lower-case name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::Generate => "generate",
            Endpoint::Chat => "chat",
            Endpoint::ChatText => "chat_text",
        }
    }
}

/// How a request picks one of several base URLs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UrlPick {
    /// Request after request, in turn.
    #[default]
    RoundRobin,
    /// By the request's affinity (GRPO group, agent session, trace conversation).
    Sticky,
}

/// `grpo`: G prompt groups x N identical samples fired at once (miles' `n_samples_per_prompt`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GrpoConfig {
    /// Number of prompt groups (G).
    pub groups: u32,
    /// Samples per group (N): identical `input_ids`, sent together.
    pub samples: u32,
    /// Total prompt length in tokens, shared prefix included.
    pub prompt_len: u32,
    /// Leading tokens every group shares (a common system prompt).
    pub system_prefix_len: u32,
    /// Groups in flight at once.
    pub groups_in_flight: u32,
}

impl Default for GrpoConfig {
    fn default() -> Self {
        GrpoConfig {
            groups: 8,
            samples: 8,
            prompt_len: 1024,
            system_prefix_len: 256,
            groups_in_flight: 2,
        }
    }
}

/// `agent`: S concurrent multi-turn sessions of T turns, each turn resending the whole context.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentConfig {
    /// Concurrent sessions (S).
    pub sessions: u32,
    /// Turns per session (T).
    pub turns: u32,
    /// Leading tokens every session shares (the agent's system prompt and tool schema).
    pub system_prefix_len: u32,
    /// Session-specific task prompt after the shared prefix.
    pub first_prompt_len: u32,
    /// New tool-output tokens appended after every model turn.
    pub tool_output_len: u32,
    /// Simulated tool run time between turns, in milliseconds (a fixed part of the wait).
    pub tool_latency_ms: u64,
    /// Mean of the exponential think time added between turns, in milliseconds (0 = none).
    #[serde(default)]
    pub think_time_ms: f64,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            sessions: 8,
            turns: 4,
            system_prefix_len: 512,
            first_prompt_len: 256,
            tool_output_len: 128,
            tool_latency_ms: 0,
            think_time_ms: 0.0,
        }
    }
}

/// `rollout`: miles-shaped GRPO batches. Each batch fires `samples` identical requests
/// per prompt for `prompts` prompts; the next batch starts when the previous one ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RolloutConfig {
    /// Prompts per batch (miles' `rollout_batch_size`).
    pub prompts: u32,
    /// Samples per prompt (miles' `n_samples_per_prompt`).
    pub samples: u32,
    /// Batches, run one after the other.
    pub batches: u32,
    /// Prompt lengths are uniform in `prompt_len_min..=prompt_len_max` tokens.
    pub prompt_len_min: u32,
    pub prompt_len_max: u32,
    /// Leading tokens every prompt shares.
    pub system_prefix_len: u32,
    /// Median of the lognormal per-sample output length (capped by `max_new_tokens`).
    pub output_len_median: f64,
    /// Sigma of the log of the output length.
    pub output_len_sigma: f64,
    /// Send each group's prompt once with `max_new_tokens` 0 and wait for it before the
    /// samples (SGLang's own `n > 1` handling).
    pub prime_prefix: bool,
}

impl Default for RolloutConfig {
    fn default() -> Self {
        RolloutConfig {
            prompts: 256,
            samples: 8,
            batches: 2,
            prompt_len_min: 1024,
            prompt_len_max: 8192,
            system_prefix_len: 0,
            output_len_median: 400.0,
            output_len_sigma: 1.0,
            prime_prefix: false,
        }
    }
}

/// `tenants`: Poisson arrivals; each request is a Zipf-popular tenant's system prompt
/// plus a short user suffix of its own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TenantsConfig {
    pub tenants: u32,
    /// Tenant system prompts are uniform in `system_len_min..=system_len_max` tokens.
    pub system_len_min: u32,
    pub system_len_max: u32,
    /// Zipf exponent of tenant popularity (0 = uniform).
    pub zipf_s: f64,
    /// Tokens of the user suffix, unique to each request.
    pub suffix_len: u32,
    /// Mean arrival rate, requests per second of simulated time.
    pub rate: f64,
    /// Requests in all.
    pub requests: u32,
    /// Send `X-SMG-Routing-Key: tenant-<n>`.
    pub routing_key: bool,
}

impl Default for TenantsConfig {
    fn default() -> Self {
        TenantsConfig {
            tenants: 128,
            system_len_min: 2048,
            system_len_max: 8192,
            zipf_s: 1.0,
            suffix_len: 256,
            rate: 20.0,
            requests: 2000,
            routing_key: false,
        }
    }
}

/// `trace`: replay of a Mooncake-format JSONL trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceConfig {
    /// The JSONL file (`timestamp`, `input_length`, `output_length`, `hash_ids`).
    pub file: PathBuf,
    /// Tokens per trace hash id (Mooncake's traces use 512).
    pub block_size: u32,
    /// Multiplies every timestamp: 0.01 replays 100x faster, 0 sends everything at once.
    pub time_scale: f64,
    /// Replay at most this many requests (the first ones of the file).
    pub max_requests: usize,
}

impl TraceConfig {
    /// A trace config with the defaults for everything but the file.
    pub fn new(file: impl Into<PathBuf>) -> TraceConfig {
        TraceConfig {
            file: file.into(),
            block_size: 512,
            time_scale: 1.0,
            max_requests: 1000,
        }
    }
}

/// The workload and its own parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Workload {
    Grpo(GrpoConfig),
    Agent(AgentConfig),
    Trace(TraceConfig),
    Rollout(RolloutConfig),
    Tenants(TenantsConfig),
}

impl Workload {
    /// Lower-case name used in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Workload::Grpo(_) => "grpo",
            Workload::Agent(_) => "agent",
            Workload::Trace(_) => "trace",
            Workload::Rollout(_) => "rollout",
            Workload::Tenants(_) => "tenants",
        }
    }

    /// The endpoint used when none is configured: `/generate` except for `agent`.
    pub fn default_endpoint(&self) -> Endpoint {
        match self {
            Workload::Agent(_) => Endpoint::Chat,
            Workload::Grpo(_)
            | Workload::Trace(_)
            | Workload::Rollout(_)
            | Workload::Tenants(_) => Endpoint::Generate,
        }
    }

    /// Output tokens per request when none is configured (`trace` uses each entry's own).
    fn default_max_new_tokens(&self) -> u32 {
        match self {
            Workload::Grpo(_) | Workload::Tenants(_) => 128,
            Workload::Agent(_) => 64,
            Workload::Trace(_) => u32::MAX,
            Workload::Rollout(_) => 4096,
        }
    }
}

/// One loadgen run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadgenConfig {
    /// Base URLs (loopback only), e.g. `http://127.0.0.1:30000`; requests spread over them.
    pub urls: Vec<String>,
    /// How a request picks one of `urls`.
    pub url_pick: UrlPick,
    /// Route; `None` = the workload's default (`chat` for agent, `generate` otherwise).
    pub endpoint: Option<Endpoint>,
    /// Ask for SSE streaming (TTFT = first data chunk).
    pub stream: bool,
    /// Output tokens per request; `None` = workload default (grpo and tenants 128,
    /// agent 64). For `trace` it caps each entry's `output_length`, for `rollout` each
    /// sample's drawn length (default 4096).
    pub max_new_tokens: Option<u32>,
    /// Requests in flight at most, over all URLs.
    pub concurrency: u32,
    /// Sent as `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// Per-request timeout.
    pub timeout_secs: f64,
    /// Wall-clock bound of the whole run: nothing starts after it and in-flight
    /// requests are cancelled at it.
    pub max_duration_secs: f64,
    /// Seeds every generated token and sampling seed.
    pub seed: u64,
    /// `model` field of chat requests.
    pub model: String,
    /// Ask for `return_logprob` (generate) / `logprobs` (chat), as miles does.
    pub return_logprob: bool,
    /// Write one JSON line per request here.
    pub records_path: Option<PathBuf>,
    /// The fleet runs this many times faster than real time: sleeps (think times,
    /// arrival gaps) are divided by it, reported durations multiplied by it.
    #[serde(default = "one")]
    pub sim_speedup: f64,
    pub workload: Workload,
}

fn one() -> f64 {
    1.0
}

impl LoadgenConfig {
    /// A config with the defaults for one workload against `urls`.
    pub fn new(urls: Vec<String>, workload: Workload) -> LoadgenConfig {
        LoadgenConfig {
            urls,
            url_pick: UrlPick::RoundRobin,
            endpoint: None,
            stream: false,
            max_new_tokens: None,
            concurrency: 64,
            api_key: None,
            timeout_secs: 600.0,
            max_duration_secs: 300.0,
            seed: 0,
            model: "default".to_string(),
            return_logprob: true,
            records_path: None,
            sim_speedup: 1.0,
            workload,
        }
    }

    /// The endpoint in effect.
    pub fn endpoint(&self) -> Endpoint {
        self.endpoint
            .unwrap_or_else(|| self.workload.default_endpoint())
    }

    /// The output length in effect (for `trace`: the cap on each entry's own).
    pub fn max_new_tokens(&self) -> u32 {
        self.max_new_tokens
            .unwrap_or_else(|| self.workload.default_max_new_tokens())
    }

    /// Per-request timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout_secs)
    }

    /// Bound of the whole run.
    pub fn max_duration(&self) -> Duration {
        Duration::from_secs_f64(self.max_duration_secs)
    }

    /// Checks every field; the first problem found is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.urls.is_empty() {
            return Err(ConfigError::NoUrl);
        }
        for url in &self.urls {
            check_loopback_url(url)?;
        }
        if self.concurrency == 0 {
            return Err(ConfigError::Zero("concurrency"));
        }
        if self.max_new_tokens == Some(0) {
            return Err(ConfigError::Zero("max_new_tokens"));
        }
        positive_secs("timeout_secs", self.timeout_secs)?;
        positive_secs("max_duration_secs", self.max_duration_secs)?;
        if !(self.sim_speedup.is_finite() && self.sim_speedup > 0.0) {
            return Err(ConfigError::Bad(
                "sim_speedup",
                "a finite number > 0",
                self.sim_speedup,
            ));
        }
        match &self.workload {
            Workload::Grpo(g) => {
                nonzero("groups", g.groups)?;
                nonzero("samples", g.samples)?;
                nonzero("prompt_len", g.prompt_len)?;
                nonzero("groups_in_flight", g.groups_in_flight)?;
                if g.system_prefix_len > g.prompt_len {
                    return Err(ConfigError::PrefixLongerThanPrompt {
                        prefix: g.system_prefix_len,
                        prompt: g.prompt_len,
                    });
                }
            }
            Workload::Agent(a) => {
                nonzero("sessions", a.sessions)?;
                nonzero("turns", a.turns)?;
                if !(a.think_time_ms.is_finite() && a.think_time_ms >= 0.0) {
                    return Err(ConfigError::Bad(
                        "think_time_ms",
                        "a finite number >= 0",
                        a.think_time_ms,
                    ));
                }
                if a.system_prefix_len + a.first_prompt_len == 0 {
                    return Err(ConfigError::Zero("system_prefix_len + first_prompt_len"));
                }
            }
            Workload::Trace(t) => {
                nonzero("trace_block_size", t.block_size)?;
                if t.max_requests == 0 {
                    return Err(ConfigError::Zero("max_requests"));
                }
                if !t.time_scale.is_finite() || t.time_scale < 0.0 {
                    return Err(ConfigError::BadTimeScale(t.time_scale));
                }
            }
            Workload::Rollout(r) => {
                nonzero("prompts", r.prompts)?;
                nonzero("samples", r.samples)?;
                nonzero("batches", r.batches)?;
                nonzero("prompt_len_min", r.prompt_len_min)?;
                range("prompt_len", r.prompt_len_min, r.prompt_len_max)?;
                if r.system_prefix_len > r.prompt_len_min {
                    return Err(ConfigError::PrefixLongerThanPrompt {
                        prefix: r.system_prefix_len,
                        prompt: r.prompt_len_min,
                    });
                }
                if !(r.output_len_median.is_finite() && r.output_len_median > 0.0) {
                    let m = r.output_len_median;
                    return Err(ConfigError::Bad(
                        "output_len_median",
                        "a finite number > 0",
                        m,
                    ));
                }
                if !(r.output_len_sigma.is_finite() && r.output_len_sigma >= 0.0) {
                    let s = r.output_len_sigma;
                    return Err(ConfigError::Bad(
                        "output_len_sigma",
                        "a finite number >= 0",
                        s,
                    ));
                }
            }
            Workload::Tenants(t) => {
                nonzero("tenants", t.tenants)?;
                nonzero("requests", t.requests)?;
                range("system_len", t.system_len_min, t.system_len_max)?;
                if t.system_len_min + t.suffix_len == 0 {
                    return Err(ConfigError::Zero("system_len_min + suffix_len"));
                }
                if !(t.zipf_s.is_finite() && t.zipf_s >= 0.0) {
                    return Err(ConfigError::Bad("zipf_s", "a finite number >= 0", t.zipf_s));
                }
                if !(t.rate.is_finite() && t.rate > 0.0) {
                    return Err(ConfigError::Bad("rate", "a finite number > 0", t.rate));
                }
            }
        }
        Ok(())
    }
}

/// A config that cannot be run.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("at least one --url is required")]
    NoUrl,
    #[error("invalid url {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error(
        "url {0:?} is not a loopback address (loadgen only drives 127.0.0.0/8, ::1 or localhost)"
    )]
    NotLoopback(String),
    #[error("{0} must be greater than 0")]
    Zero(&'static str),
    #[error("{0} must be a positive finite number of seconds, got {1}")]
    BadSeconds(&'static str, f64),
    #[error("system prefix ({prefix} tokens) is longer than the prompt ({prompt} tokens)")]
    PrefixLongerThanPrompt { prefix: u32, prompt: u32 },
    #[error("time scale must be a finite number >= 0, got {0}")]
    BadTimeScale(f64),
    #[error("{0} must be {1}, got {2}")]
    Bad(&'static str, &'static str, f64),
    #[error("{name}_min ({min}) is greater than {name}_max ({max})")]
    BadRange {
        name: &'static str,
        min: u32,
        max: u32,
    },
}

fn range(name: &'static str, min: u32, max: u32) -> Result<(), ConfigError> {
    if min > max {
        Err(ConfigError::BadRange { name, min, max })
    } else {
        Ok(())
    }
}

fn nonzero(name: &'static str, value: u32) -> Result<(), ConfigError> {
    if value == 0 {
        Err(ConfigError::Zero(name))
    } else {
        Ok(())
    }
}

fn positive_secs(name: &'static str, value: f64) -> Result<(), ConfigError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(ConfigError::BadSeconds(name, value))
    }
}

/// Accepts `http://` URLs whose host is a loopback address or `localhost`.
pub fn check_loopback_url(raw: &str) -> Result<(), ConfigError> {
    let bad = |reason: &str| ConfigError::BadUrl {
        url: raw.to_string(),
        reason: reason.to_string(),
    };
    let url = url::Url::parse(raw).map_err(|e| bad(&e.to_string()))?;
    if url.scheme() != "http" {
        return Err(bad("only http:// is supported"));
    }
    let loopback = match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => return Err(bad("no host")),
    };
    if loopback {
        Ok(())
    } else {
        Err(ConfigError::NotLoopback(raw.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grpo() -> LoadgenConfig {
        LoadgenConfig::new(
            vec!["http://127.0.0.1:30000".into()],
            Workload::Grpo(GrpoConfig::default()),
        )
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(grpo().validate(), Ok(()));
        assert_eq!(grpo().endpoint(), Endpoint::Generate);
        assert_eq!(grpo().max_new_tokens(), 128);
        let agent = LoadgenConfig::new(
            vec!["http://localhost:1".into()],
            Workload::Agent(AgentConfig::default()),
        );
        assert_eq!(agent.validate(), Ok(()));
        assert_eq!(agent.endpoint(), Endpoint::Chat);
    }

    #[test]
    fn only_loopback_http_urls_are_accepted() {
        assert!(check_loopback_url("http://127.0.0.1:8000").is_ok());
        assert!(check_loopback_url("http://127.3.2.1:8000/prefix").is_ok());
        assert!(check_loopback_url("http://[::1]:8000").is_ok());
        assert!(check_loopback_url("http://LOCALHOST:8000").is_ok());
        assert_eq!(
            check_loopback_url("http://10.0.0.1:8000"),
            Err(ConfigError::NotLoopback("http://10.0.0.1:8000".into()))
        );
        assert!(matches!(
            check_loopback_url("https://127.0.0.1"),
            Err(ConfigError::BadUrl { .. })
        ));
        assert!(matches!(
            check_loopback_url("not a url"),
            Err(ConfigError::BadUrl { .. })
        ));
    }

    #[test]
    fn bad_fields_are_named() {
        let mut c = grpo();
        c.concurrency = 0;
        assert_eq!(c.validate(), Err(ConfigError::Zero("concurrency")));
        let mut c = grpo();
        c.urls.clear();
        assert_eq!(c.validate(), Err(ConfigError::NoUrl));
        let mut c = grpo();
        c.max_duration_secs = f64::NAN;
        assert!(matches!(c.validate(), Err(ConfigError::BadSeconds(..))));
        let mut c = grpo();
        c.workload = Workload::Grpo(GrpoConfig {
            system_prefix_len: 2000,
            ..GrpoConfig::default()
        });
        assert!(matches!(
            c.validate(),
            Err(ConfigError::PrefixLongerThanPrompt { .. })
        ));
        let mut c = grpo();
        c.workload = Workload::Trace(TraceConfig {
            time_scale: -1.0,
            ..TraceConfig::new("x")
        });
        assert_eq!(c.validate(), Err(ConfigError::BadTimeScale(-1.0)));
    }

    #[test]
    fn new_workloads_and_the_speedup_are_checked() {
        let with = |w| LoadgenConfig::new(vec!["http://127.0.0.1:1".into()], w);
        let rollout = with(Workload::Rollout(RolloutConfig::default()));
        assert_eq!(rollout.validate(), Ok(()));
        assert_eq!(rollout.max_new_tokens(), 4096);
        let tenants = with(Workload::Tenants(TenantsConfig::default()));
        assert_eq!(tenants.validate(), Ok(()));
        assert_eq!(tenants.max_new_tokens(), 128);
        let mut c = rollout.clone();
        c.sim_speedup = 0.0;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Bad("sim_speedup", ..))
        ));
        let c = with(Workload::Rollout(RolloutConfig {
            prompt_len_min: 900,
            prompt_len_max: 800,
            ..RolloutConfig::default()
        }));
        assert!(matches!(c.validate(), Err(ConfigError::BadRange { .. })));
        let c = with(Workload::Rollout(RolloutConfig {
            system_prefix_len: 2000,
            ..RolloutConfig::default()
        }));
        assert!(matches!(
            c.validate(),
            Err(ConfigError::PrefixLongerThanPrompt { .. })
        ));
        let c = with(Workload::Rollout(RolloutConfig {
            output_len_sigma: -1.0,
            ..RolloutConfig::default()
        }));
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Bad("output_len_sigma", ..))
        ));
        let c = with(Workload::Tenants(TenantsConfig {
            rate: 0.0,
            ..TenantsConfig::default()
        }));
        assert!(matches!(c.validate(), Err(ConfigError::Bad("rate", ..))));
        let c = with(Workload::Agent(AgentConfig {
            think_time_ms: f64::NAN,
            ..AgentConfig::default()
        }));
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Bad("think_time_ms", ..))
        ));
    }

    #[test]
    fn configs_round_trip_through_json() {
        let mut c = grpo();
        c.workload = Workload::Trace(TraceConfig::new("/tmp/t.jsonl"));
        c.endpoint = Some(Endpoint::Chat);
        let json = serde_json::to_string(&c).unwrap();
        assert!(json.contains(r#""kind":"trace""#), "{json}");
        assert_eq!(serde_json::from_str::<LoadgenConfig>(&json).unwrap(), c);
        // Configs saved before sim_speedup and think_time_ms existed still load.
        let old = json.replace(r#""sim_speedup":1.0,"#, "");
        assert_ne!(old, json);
        assert_eq!(serde_json::from_str::<LoadgenConfig>(&old).unwrap(), c);
    }
}
