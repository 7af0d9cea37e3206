//! The one declaration of every router option. Each field below yields the `--long-flag`
//! (clap), the `KVROUTER_*` environment variable (clap `env`), the snake_case key of the
//! `--config` TOML file (serde; KV options under `[kv]`) and the built-in default (clap
//! `default_value*`, also what [`Options::default`] returns). Merging the sources lives in
//! `cli.rs` (which values were given explicitly) and `file.rs` (the file fills the rest);
//! validation into [`super::Config`] lives in `mod.rs`.

use std::path::PathBuf;

use clap::{CommandFactory, Parser};
use serde::{Deserialize, Serialize};

/// Every `router` option, as given (not yet validated). `--worker-urls` may be repeated and
/// accumulates. Precedence: command line > `KVROUTER_*` environment > `--config` file > default.
#[derive(Debug, Clone, PartialEq, Parser, Serialize, Deserialize)]
#[command(
    name = "router",
    version,
    about = "KV-cache-aware router for SGLang workers",
    after_help = "`router register --help`: the etcd registration sidecar to run beside a worker (docs/discovery.md)."
)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// TOML configuration file (same keys as the long flags, with `_` instead of `-`).
    #[arg(long, env = "KVROUTER_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Print the annotated example configuration file (every key and its default) and exit.
    #[arg(long)]
    #[serde(skip)]
    pub print_example_config: bool,
    /// Routing mode: kv | round-robin | random | least-load.
    #[arg(long, env = "KVROUTER_MODE", default_value = "kv")]
    pub mode: String,
    /// Tokens per KV page (router block size, at least 1). Any worker page size is served;
    /// in kv mode a worker's must equal it or divide it (smaller pages are folded into router
    /// blocks, e.g. SGLang's default 1), others are refused.
    #[arg(long, env = "KVROUTER_PAGE_SIZE", default_value_t = 16)]
    pub page_size: u32,
    /// Workers registered at start (space- or comma-separated; in the background, requests
    /// get 503 until one is healthy).
    #[arg(long, env = "KVROUTER_WORKER_URLS", num_args = 0.., value_delimiter = ',', action = clap::ArgAction::Append)]
    pub worker_urls: Vec<String>,
    /// Worker address allow-list (CIDRs, comma-separated or repeated). When set, only
    /// workers whose IP literal, or every address their hostname resolves to at
    /// registration, is inside it are registered; when unset, every address but a
    /// link-local one (169.254.0.0/16, fe80::/10).
    #[arg(long, env = "KVROUTER_WORKER_ALLOW_CIDR", num_args = 0.., value_delimiter = ',', action = clap::ArgAction::Append)]
    pub worker_allow_cidr: Vec<String>,
    /// Address to bind.
    #[arg(long, env = "KVROUTER_HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Port to bind (0 = ephemeral; the router prints `listening on http://...`).
    #[arg(long, env = "KVROUTER_PORT", default_value_t = 30000)]
    pub port: u16,
    /// Time to first response byte from a worker, in seconds (streams are not cut after that).
    #[arg(long, env = "KVROUTER_REQUEST_TIMEOUT_SECS", default_value_t = 1800.0)]
    pub request_timeout_secs: f64,
    /// TCP connect timeout to a worker, in seconds.
    #[arg(long, env = "KVROUTER_CONNECT_TIMEOUT_SECS", default_value_t = 5.0)]
    pub connect_timeout_secs: f64,
    /// Seconds a pooled connection to a worker may sit idle and still be reused. Keep it
    /// below the workers' keep-alive: SGLang closes an idle connection after
    /// `SGLANG_TIMEOUT_KEEP_ALIVE` (5 s by default), and a request sent on a connection the
    /// worker is closing fails (the router cannot tell whether the worker read it, so it is
    /// not retried).
    #[arg(
        long,
        env = "KVROUTER_WORKER_IDLE_TIMEOUT_SECS",
        default_value_t = crate::workers::http::WORKER_IDLE_TIMEOUT.as_secs_f64()
    )]
    pub worker_idle_timeout_secs: f64,
    /// Seconds between health checks (GET /health) of every worker.
    #[arg(
        long,
        env = "KVROUTER_HEALTH_CHECK_INTERVAL_SECS",
        default_value_t = 10.0
    )]
    pub health_check_interval_secs: f64,
    /// Timeout of one health check, in seconds.
    #[arg(
        long,
        env = "KVROUTER_HEALTH_CHECK_TIMEOUT_SECS",
        default_value_t = 5.0
    )]
    pub health_check_timeout_secs: f64,
    /// Consecutive failed checks before a worker is marked unhealthy.
    #[arg(long, env = "KVROUTER_HEALTH_FAILURE_THRESHOLD", default_value_t = 3)]
    pub health_failure_threshold: u32,
    /// Consecutive successful checks before an unhealthy worker returns.
    #[arg(long, env = "KVROUTER_HEALTH_SUCCESS_THRESHOLD", default_value_t = 2)]
    pub health_success_threshold: u32,
    /// Attempts in all for a request whose worker fails before its first response byte (a
    /// 408/429/500/502/503/504 answer, a refused or broken connection), each on a newly picked
    /// worker, the failed ones last (sgl-router's count: 5 = up to 5 attempts; 0 and 1 = no
    /// retry). Waits the backoff in between, never beyond `request_timeout_secs`.
    #[arg(long, env = "KVROUTER_RETRY_MAX_RETRIES", default_value_t = 5)]
    pub retry_max_retries: u32,
    /// Backoff before the first retry, in milliseconds (x `retry_backoff_multiplier` per retry).
    #[arg(long, env = "KVROUTER_RETRY_INITIAL_BACKOFF_MS", default_value_t = 50)]
    pub retry_initial_backoff_ms: u64,
    /// Upper bound of the retry backoff, in milliseconds.
    #[arg(long, env = "KVROUTER_RETRY_MAX_BACKOFF_MS", default_value_t = 30000)]
    pub retry_max_backoff_ms: u64,
    /// Largest accepted request body, in bytes (413 above; sgl-router's default is 512 MiB).
    #[arg(long, env = "KVROUTER_MAX_PAYLOAD_SIZE", default_value_t = 64 * 1024 * 1024)]
    pub max_payload_size: usize,
    /// Seconds a client may take to send a request's headers (HTTP/1); also how long a
    /// keep-alive connection may sit idle between requests. Beyond, the connection is closed.
    /// Longer than common clients' pool idle timeouts (reqwest/hyper-util and Go 90 s,
    /// aiohttp 15 s, httpx 5 s), so the client drops an idle connection first: a server that
    /// closes first races a client reusing it, whose request then fails with a reset.
    #[arg(
        long,
        env = "KVROUTER_HEADER_READ_TIMEOUT_SECS",
        default_value_t = 120.0
    )]
    pub header_read_timeout_secs: f64,
    /// Seconds a new connection may take to send its first request head, extended by one
    /// second per 500 bytes it sends, up to three times this (Apache mod_reqtimeout's
    /// `header=20-40,MinRate=500` form). Beyond, the connection is closed: a slow or silent
    /// connection gives its slot back in seconds. Later heads on a keep-alive connection are
    /// bounded by `header_read_timeout_secs`.
    #[arg(
        long,
        env = "KVROUTER_REQUEST_HEAD_TIMEOUT_SECS",
        default_value_t = 10.0
    )]
    pub request_head_timeout_secs: f64,
    /// Seconds a request body may go without a byte arriving; beyond, 408 and the connection
    /// is closed (the partial body is freed).
    #[arg(long, env = "KVROUTER_BODY_READ_TIMEOUT_SECS", default_value_t = 30.0)]
    pub body_read_timeout_secs: f64,
    /// Client connections open at once (0 = auto: (open-file soft limit - 64) / 2, leaving a
    /// descriptor per client for its worker connection). At the limit a new connection closes
    /// the oldest one that has not sent a request head, else the longest-idle keep-alive;
    /// when every connection is busy, 8 more are served for probes and metrics only (503 for
    /// the rest), then new connections wait in the listen backlog.
    #[arg(long, env = "KVROUTER_MAX_CONNECTIONS", default_value_t = 0)]
    pub max_connections: usize,
    /// Data-plane requests handled at once, from admission until the worker's response head
    /// (sgl-router's flag; -1 = no limit). Beyond, up to `queue_size` wait; then 429.
    #[arg(long, env = "KVROUTER_MAX_CONCURRENT_REQUESTS", default_value_t = -1, allow_hyphen_values = true)]
    pub max_concurrent_requests: i64,
    /// Data-plane requests waiting for a `max_concurrent_requests` slot (sgl-router's flag;
    /// 0 = answer 429 at once when every slot is taken).
    #[arg(long, env = "KVROUTER_QUEUE_SIZE", default_value_t = 100)]
    pub queue_size: usize,
    /// HTTP/2: streams a client may open at once on one connection.
    #[arg(
        long,
        env = "KVROUTER_HTTP2_MAX_CONCURRENT_STREAMS",
        default_value_t = 256
    )]
    pub http2_max_concurrent_streams: u32,
    /// HTTP/2: seconds between keep-alive PINGs to an idle client (0 = none); a client that does
    /// not answer one within the same time is disconnected.
    #[arg(
        long,
        env = "KVROUTER_HTTP2_KEEP_ALIVE_INTERVAL_SECS",
        default_value_t = 60.0
    )]
    pub http2_keep_alive_interval_secs: f64,
    /// Seconds without progress (no response head, or no body data) after which a request to
    /// a worker the health checker has marked unhealthy is aborted (and, before the first byte,
    /// retried on another worker). Requests to healthy workers are never cut by it.
    #[arg(
        long,
        env = "KVROUTER_STREAM_IDLE_TIMEOUT_SECS",
        default_value_t = 30.0
    )]
    pub stream_idle_timeout_secs: f64,
    /// Idle seconds after which an `X-SMG-Routing-Key` sticky entry expires.
    #[arg(long, env = "KVROUTER_STICKY_TTL_SECS", default_value_t = 14400.0)]
    pub sticky_ttl_secs: f64,
    // Bounds on client-grown state (config/bounds.rs; docs/router.md, Limits).
    /// `X-SMG-Routing-Key` sticky keys held at most (each stored as a 16-byte hash, whatever
    /// its length); beyond, the least recently used eighth is evicted.
    #[arg(long, env = "KVROUTER_STICKY_MAX_KEYS", default_value_t = 262_144)]
    pub sticky_max_keys: usize,
    /// Request-body bytes all requests in flight may hold at once, counted as they arrive (0 =
    /// auto: the larger of 1 GiB and 2 x `max_payload_size`); a body that would pass it gets
    /// 503 `inflight_body_budget`. At least `max_payload_size`.
    #[arg(long, env = "KVROUTER_MAX_INFLIGHT_BODY_BYTES", default_value_t = 0)]
    pub max_inflight_body_bytes: usize,
    /// Bearer token required on data-plane routes (/generate, /v1/*).
    #[arg(long, env = "KVROUTER_API_KEY")]
    pub api_key: Option<String>,
    /// Bearer token required on worker-management and admin routes (defaults to `--api-key`).
    #[arg(long, env = "KVROUTER_ADMIN_API_KEY")]
    pub admin_api_key: Option<String>,
    /// Serve the admin routes without an admin key on a non-loopback `--host` (by default they
    /// answer 403 there: anyone reaching the port could flush, pause, refit or drop workers).
    #[arg(long, env = "KVROUTER_INSECURE_ADMIN", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub insecure_admin: bool,
    /// Requests held while the refit gate is closed (paused); beyond it they get 503.
    #[arg(long, env = "KVROUTER_REFIT_QUEUE_SIZE", default_value_t = 4096)]
    pub refit_queue_size: usize,
    /// Refuse requests with 503 while paused instead of holding them.
    #[arg(long, env = "KVROUTER_REFIT_REFUSE_WHEN_PAUSED", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub refit_refuse_when_paused: bool,
    /// Route to a worker that registers or restarts at another weight version than the
    /// fleet (default: hold it as `awaiting_refit` until a refit levels it).
    #[arg(long, env = "KVROUTER_ALLOW_VERSION_MISMATCH", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub allow_version_mismatch: bool,
    /// Seconds a SIGTERM/SIGINT drain lets requests in flight finish (new connections are
    /// refused and `/readiness` answers 503 at once); what is left is then aborted at the workers.
    #[arg(
        long,
        env = "KVROUTER_SHUTDOWN_GRACE_PERIOD_SECS",
        default_value_t = 180
    )]
    pub shutdown_grace_period_secs: u64,
    /// Log filter: error | warn | info | debug | trace, Python's words (warning, critical) too,
    /// or a tracing filter directive (`info,kvrouter::events=debug`).
    #[arg(long, env = "KVROUTER_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log as JSON lines.
    #[arg(long, env = "KVROUTER_JSON_LOG", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub json_log: bool,
    /// Local model directory whose `tokenizer.json` and chat template (`tokenizer_config.json`,
    /// `chat_template.jinja`) KV mode uses to tokenize text requests for routing (never
    /// downloaded; without it, a worker's reported local model path is used, else text
    /// requests are routed by load).
    #[arg(long, env = "KVROUTER_MODEL_PATH")]
    pub model_path: Option<PathBuf>,
    /// Tokenizer directory or `tokenizer.json` file, when not the one in `--model-path`.
    #[arg(long, env = "KVROUTER_TOKENIZER_PATH")]
    pub tokenizer_path: Option<PathBuf>,
    /// Memory for the per-session tokenization cache of chat prompts, in MiB (0 disables it:
    /// every turn is tokenized whole).
    #[arg(long, env = "KVROUTER_TOKENIZER_CACHE_MB", default_value_t = 64)]
    pub tokenizer_cache_mb: usize,
    /// etcd endpoints for worker discovery and router self-registration (comma-separated or
    /// repeated, `http://host:2379` or `host:2379`). When set, the router watches
    /// `<etcd_prefix>/workers/` and adds, drains and removes workers as keys appear, change and
    /// expire, and registers itself under `<etcd_prefix>/routers/` (see docs/discovery.md).
    #[arg(long, env = "KVROUTER_ETCD_ENDPOINTS", num_args = 0.., value_delimiter = ',', action = clap::ArgAction::Append)]
    pub etcd_endpoints: Vec<String>,
    /// Key prefix of the discovery keys in etcd (`<prefix>/workers/<id>`, `<prefix>/routers/<id>`).
    #[arg(long, env = "KVROUTER_ETCD_PREFIX", default_value = "/kvrouter")]
    pub etcd_prefix: String,
    /// TTL of the etcd leases that hold this router's key (and the keys `router register`
    /// writes), in seconds; a key disappears this long after its holder stops renewing it.
    #[arg(long, env = "KVROUTER_ETCD_LEASE_TTL_SECS", default_value_t = 10)]
    pub etcd_lease_ttl_secs: u64,
    /// URL other replicas and operators reach this router at, as written under
    /// `<etcd_prefix>/routers/` (default: `http://<host>:<bound port>`).
    #[arg(long, env = "KVROUTER_ETCD_ADVERTISE_URL")]
    pub etcd_advertise_url: Option<String>,
    /// KV-mode options (flags at top level, `[kv]` table in the file; see src/config/kv.rs).
    #[command(flatten)]
    pub kv: super::kv::KvOptions,
    // sgl-router / SMG compatible options (compat.rs: every peer flag, its aliases here, the
    // accepted-and-ignored and the refused ones).
    /// sgl-router / SMG policy name, mapped onto `mode`: cache_aware -> kv, round_robin ->
    /// round-robin, random -> random, least_load | power_of_two -> least-load, passthrough ->
    /// round-robin, manual | consistent_hashing | prefix_hash ->
    /// least-load (strict `X-SMG-Routing-Key` stickiness, new keys to the least-loaded worker).
    /// An error if `--mode` is also given and disagrees.
    #[arg(long, env = "KVROUTER_POLICY")]
    pub policy: Option<String>,
    /// No retry on another worker (sgl-router's `--disable-retries`; same as `retry_max_retries = 0`).
    #[arg(long, env = "KVROUTER_DISABLE_RETRIES", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub disable_retries: bool,
    /// Path the periodic health checker probes on each worker (registration still waits for
    /// `/health`).
    #[arg(
        long,
        env = "KVROUTER_HEALTH_CHECK_ENDPOINT",
        default_value = "/health"
    )]
    pub health_check_endpoint: String,
    /// How long a registering worker may take to answer its first health probe, in seconds
    /// (a worker loading a large model takes minutes; sgl-router's default).
    #[arg(
        long,
        env = "KVROUTER_WORKER_STARTUP_TIMEOUT_SECS",
        default_value_t = 1800.0
    )]
    pub worker_startup_timeout_secs: f64,
    /// Accepted for sgl-router compatibility: the router always reads each worker's DP size
    /// from the worker and, for `dp_size > 1`, picks a rank and injects `routed_dp_rank`, with or
    /// without this flag.
    #[arg(long, env = "KVROUTER_DP_AWARE", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub dp_aware: bool,
    /// Address of the second listener serving only `/metrics` (with `prometheus_port`).
    #[arg(long, env = "KVROUTER_PROMETHEUS_HOST", default_value = "127.0.0.1")]
    pub prometheus_host: String,
    /// Port of a second listener serving only `/metrics` (sgl-router's 29000; 0: none;
    /// `/metrics` is always on the main port too). When the port is busy, the router logs a
    /// warning and runs without it, unless the port was given explicitly (then it exits).
    #[arg(long, env = "KVROUTER_PROMETHEUS_PORT", default_value_t = 29000)]
    pub prometheus_port: u16,
    /// Also serve the series sgl-router / SMG dashboards query, under their names, on
    /// `/metrics`: `sgl-router` (`sgl_router_*`, sgl-router <= 0.2) or `smg` (`smg_*`,
    /// sgl-router 0.3 / SMG). Unset: only `kvrouter_*` (docs/metrics.md).
    #[arg(long, env = "KVROUTER_METRICS_COMPAT", value_parser = ["sgl-router", "smg"])]
    pub metrics_compat: Option<String>,
    // Retry backoff, queue timeout and circuit breaker (sgl-router's flags and defaults).
    /// Growth of the retry backoff per retry.
    #[arg(long, env = "KVROUTER_RETRY_BACKOFF_MULTIPLIER", default_value_t = 1.5)]
    pub retry_backoff_multiplier: f64,
    /// Each retry delay is scaled by a random factor in [1 - this, 1 + this] (0 to 1).
    #[arg(long, env = "KVROUTER_RETRY_JITTER_FACTOR", default_value_t = 0.2)]
    pub retry_jitter_factor: f64,
    /// Seconds a request may wait in the `queue_size` queue for a `max_concurrent_requests`
    /// slot; beyond, 408.
    #[arg(long, env = "KVROUTER_QUEUE_TIMEOUT_SECS", default_value_t = 60.0)]
    pub queue_timeout_secs: f64,
    /// Consecutive failed attempts on a worker (no response head, or a non-2xx one) that
    /// open its circuit: it gets no requests for `cb_timeout_duration_secs`.
    #[arg(long, env = "KVROUTER_CB_FAILURE_THRESHOLD", default_value_t = 10)]
    pub cb_failure_threshold: u32,
    /// Consecutive successes in the half-open state that close the circuit again.
    #[arg(long, env = "KVROUTER_CB_SUCCESS_THRESHOLD", default_value_t = 3)]
    pub cb_success_threshold: u32,
    /// Seconds an open circuit stays open before it lets trial requests through (half-open).
    #[arg(
        long,
        env = "KVROUTER_CB_TIMEOUT_DURATION_SECS",
        default_value_t = 60.0
    )]
    pub cb_timeout_duration_secs: f64,
    /// Accepted and validated as in sgl-router, whose breaker does not use it either: failures
    /// are counted consecutively, without a time window.
    #[arg(
        long,
        env = "KVROUTER_CB_WINDOW_DURATION_SECS",
        default_value_t = 120.0
    )]
    pub cb_window_duration_secs: f64,
    /// No circuit breaker (every worker's circuit stays closed).
    #[arg(long, env = "KVROUTER_DISABLE_CIRCUIT_BREAKER", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub disable_circuit_breaker: bool,
    /// Client request headers forwarded to workers besides the default allow-list
    /// (Content-Type, Content-Length, Accept, X-Request-Id, X-Correlation-Id, X-Request-Id-*,
    /// traceparent, tracestate, baggage, X-SMG-Routing-Key, X-Sglext-*): header names,
    /// `prefix*`, or `*` for every end-to-end header (comma-separated or repeated). Cookie,
    /// Authorization and SGLang's X-Override-* are dropped unless named (docs/router.md).
    #[arg(long, env = "KVROUTER_FORWARD_REQUEST_HEADER", num_args = 0.., value_delimiter = ',', action = clap::ArgAction::Append)]
    pub forward_request_header: Vec<String>,
    // PD disaggregation (sgl-router / SMG flags; src/pd, docs/pd.md).
    /// Prefill-decode disaggregation: every request goes to a prefill and a decode worker at
    /// once, with SGLang's bootstrap fields (docs/pd.md).
    #[arg(long, env = "KVROUTER_PD_DISAGGREGATION", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub pd_disaggregation: bool,
    /// A prefill worker, `URL [BOOTSTRAP_PORT|none]` (repeatable): its PD bootstrap port, or
    /// none (null: each worker then uses its own `--disaggregation-bootstrap-port`). In the
    /// file, one string per worker: `"http://10.0.0.1:30000 8998"`.
    #[arg(long, num_args = 1..=2, value_names = ["URL", "BOOTSTRAP_PORT"], action = clap::ArgAction::Append)]
    pub prefill: Vec<String>,
    /// A decode worker URL (repeatable).
    #[arg(long, action = clap::ArgAction::Append)]
    pub decode: Vec<String>,
    /// The prefill leg's policy (sgl-router names; default: `--mode` / `--policy`).
    #[arg(long, env = "KVROUTER_PREFILL_POLICY")]
    pub prefill_policy: Option<String>,
    /// The decode leg's policy (sgl-router names; default: the KV index when every decode
    /// worker publishes KV events, else least-load).
    #[arg(long, env = "KVROUTER_DECODE_POLICY")]
    pub decode_policy: Option<String>,
}

impl Default for Options {
    /// Every option at its declared default (environment not consulted).
    fn default() -> Self {
        super::declared::declared_defaults(Options::command()).expect("declared defaults parse")
    }
}
