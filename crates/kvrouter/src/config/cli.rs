//! Command-line flags of the `router` binary. Every flag is optional here (so the file and
//! defaults can fill gaps) and can also be given as a `KVROUTER_*` environment variable.

use std::path::PathBuf;

use clap::Parser;

/// `router` flags (`--worker-urls` may be repeated and accumulates). CLI beats environment (clap `env`), which beats `--config` file, which beats defaults.
#[derive(Debug, Clone, Default, Parser)]
#[command(
    name = "router",
    version,
    about = "KV-cache-aware router for SGLang workers"
)]
pub struct Cli {
    /// TOML configuration file (same keys as the long flags, with `_` instead of `-`).
    #[arg(long, env = "KVROUTER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Routing mode: kv | round-robin | random | least-load.
    #[arg(long, env = "KVROUTER_MODE")]
    pub mode: Option<String>,
    /// KV page size (tokens per block) the workers must run with.
    #[arg(long, env = "KVROUTER_PAGE_SIZE")]
    pub page_size: Option<u32>,
    /// Workers registered at start (space- or comma-separated).
    #[arg(long, env = "KVROUTER_WORKER_URLS", num_args = 0.., value_delimiter = ',', action = clap::ArgAction::Append)]
    pub worker_urls: Option<Vec<String>>,
    /// Address to bind.
    #[arg(long, env = "KVROUTER_HOST")]
    pub host: Option<String>,
    /// Port to bind (0 = ephemeral).
    #[arg(long, env = "KVROUTER_PORT")]
    pub port: Option<u16>,
    /// Time to first response byte from a worker, in seconds (streams are not cut after that).
    #[arg(long, env = "KVROUTER_REQUEST_TIMEOUT_SECS")]
    pub request_timeout_secs: Option<f64>,
    /// TCP connect timeout to a worker, in seconds.
    #[arg(long, env = "KVROUTER_CONNECT_TIMEOUT_SECS")]
    pub connect_timeout_secs: Option<f64>,
    /// Seconds between health checks of every worker.
    #[arg(long, env = "KVROUTER_HEALTH_CHECK_INTERVAL_SECS")]
    pub health_check_interval_secs: Option<f64>,
    /// Timeout of one health check, in seconds.
    #[arg(long, env = "KVROUTER_HEALTH_CHECK_TIMEOUT_SECS")]
    pub health_check_timeout_secs: Option<f64>,
    /// Consecutive failed checks before a worker is marked unhealthy.
    #[arg(long, env = "KVROUTER_HEALTH_FAILURE_THRESHOLD")]
    pub health_failure_threshold: Option<u32>,
    /// Consecutive successful checks before an unhealthy worker returns.
    #[arg(long, env = "KVROUTER_HEALTH_SUCCESS_THRESHOLD")]
    pub health_success_threshold: Option<u32>,
    /// Extra attempts on another worker when one fails before its first response byte.
    #[arg(long, env = "KVROUTER_RETRY_MAX_RETRIES")]
    pub retry_max_retries: Option<u32>,
    /// Backoff before the first retry, in milliseconds (doubles per retry).
    #[arg(long, env = "KVROUTER_RETRY_INITIAL_BACKOFF_MS")]
    pub retry_initial_backoff_ms: Option<u64>,
    /// Upper bound of the retry backoff, in milliseconds.
    #[arg(long, env = "KVROUTER_RETRY_MAX_BACKOFF_MS")]
    pub retry_max_backoff_ms: Option<u64>,
    /// Largest accepted request body, in bytes.
    #[arg(long, env = "KVROUTER_MAX_PAYLOAD_SIZE")]
    pub max_payload_size: Option<usize>,
    /// Idle seconds after which an `X-SMG-Routing-Key` sticky entry expires.
    #[arg(long, env = "KVROUTER_STICKY_TTL_SECS")]
    pub sticky_ttl_secs: Option<f64>,
    /// Bearer token required on data-plane routes.
    #[arg(long, env = "KVROUTER_API_KEY")]
    pub api_key: Option<String>,
    /// Bearer token required on worker-management and admin routes (defaults to `--api-key`).
    #[arg(long, env = "KVROUTER_ADMIN_API_KEY")]
    pub admin_api_key: Option<String>,
    /// Requests held while the refit gate is closed (paused); beyond it they get 503.
    #[arg(long, env = "KVROUTER_REFIT_QUEUE_SIZE")]
    pub refit_queue_size: Option<usize>,
    /// Refuse requests with 503 while paused instead of holding them.
    #[arg(long, env = "KVROUTER_REFIT_REFUSE_WHEN_PAUSED", num_args = 0..=1, default_missing_value = "true")]
    pub refit_refuse_when_paused: Option<bool>,
    /// Route to a worker that registers or restarts at another weight version than the
    /// fleet (default: hold it as `awaiting_refit` until a refit levels it).
    #[arg(long, env = "KVROUTER_ALLOW_VERSION_MISMATCH", num_args = 0..=1, default_missing_value = "true")]
    pub allow_version_mismatch: Option<bool>,
    /// Log filter: error | warn | info | debug | trace (or a tracing filter directive).
    #[arg(long, env = "KVROUTER_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// Log as JSON lines.
    #[arg(long, env = "KVROUTER_JSON_LOG", num_args = 0..=1, default_missing_value = "true")]
    pub json_log: Option<bool>,
    /// KV-mode flags (src/config/kv.rs).
    #[command(flatten)]
    pub kv: super::kv::KvCli,
}
