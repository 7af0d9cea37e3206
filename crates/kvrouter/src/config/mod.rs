//! Router configuration: CLI flags, environment variables and a TOML file merged into one validated `Config`.
//!
//! Every option is declared once, in [`Options`] (options.rs; KV ones in kv.rs), which yields
//! its flag, `KVROUTER_*` variable, file key and default. Precedence: command line >
//! `KVROUTER_*` environment variable > `--config` file > default.
//! [`Config::from_sources`] merges and validates; every error names the offending field.

pub mod bounds;
pub mod cli;
pub mod compat;
pub mod env_check;
mod etcd;
pub mod example;
pub mod file;
pub mod kv;
pub mod limits;
pub mod options;
mod pd;
mod resilience;

use std::time::Duration;

pub use bounds::Bounds;
pub use cli::Cli;
pub use file::FileConfig;
pub use kv::{KvConfig, KvOptions, PredictCredit};
pub use crate::log_level;
pub use limits::Limits;
pub use crate::routing::Mode;
pub use options::Options;

/// A configuration problem found at start; `field` is the flag/key name (snake_case).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid configuration: {field}: {message}")]
pub struct ConfigError {
    pub field: String,
    pub message: String,
}

fn invalid(field: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.to_string(),
        message: message.into(),
    }
}

/// The validated router configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub mode: Mode,
    pub page_size: u32,
    /// Canonical, credential-free worker URLs.
    pub worker_urls: Vec<String>,
    /// `--worker-allow-cidr` (empty: every address but link-local ones).
    pub worker_allow_cidr: Vec<ipnet::IpNet>,
    /// Credentials split off `--worker-urls`, by canonical URL (`Debug` prints `***`).
    pub worker_credentials: Vec<(String, crate::workers::url::Credentials)>,
    pub host: String,
    pub port: u16,
    /// Deadline for the worker's first response byte (not for the whole stream).
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    /// Pooled worker connections idle longer than this are not reused (below the workers'
    /// keep-alive).
    pub worker_idle_timeout: Duration,
    pub health_check_interval: Duration,
    pub health_check_timeout: Duration,
    pub health_failure_threshold: u32,
    pub health_success_threshold: u32,
    /// Extra attempts after the first one (0 = no retry; `--retry-max-retries` counts the
    /// first attempt too, as sgl-router does).
    pub retry_max_retries: u32,
    /// The wait between attempts (`--retry-*-backoff-ms`, multiplier, jitter).
    pub retry_backoff: crate::backoff::ExponentialBackoff,
    /// Every worker's circuit breaker (`--cb-*`, `--disable-circuit-breaker`).
    pub circuit_breaker: crate::workers::BreakerConfig,
    pub max_payload_size: usize,
    /// Server and data-plane resource limits (docs/router.md, "Limits").
    pub limits: Limits,
    pub sticky_ttl: Duration,
    /// Bounds on client-grown state (sticky keys, request bodies in flight).
    pub bounds: Bounds,
    pub api_key: Option<String>,
    /// Key for admin and worker-management routes; falls back to `api_key` when unset.
    pub admin_api_key: Option<String>,
    /// Serve admin routes keyless on a non-loopback host (see [`Config::admin_locked`]).
    pub insecure_admin: bool,
    /// Requests held while the refit gate is closed (beyond: 503).
    pub refit_queue_size: usize,
    /// Refuse (503) instead of holding requests while paused.
    pub refit_refuse_when_paused: bool,
    /// Route to workers whose weight version differs from the fleet's (no `awaiting_refit` hold).
    pub allow_version_mismatch: bool,
    /// How long a SIGTERM/SIGINT drain waits for requests in flight (0 = abort at once).
    pub shutdown_grace_period: Duration,
    pub log_level: String,
    pub json_log: bool,
    /// KV-mode settings.
    pub kv: KvConfig,
    /// Where text requests' tokenizer is read from (`--tokenizer-path`, else `--model-path`).
    pub tokenizer_path: Option<std::path::PathBuf>,
    /// Byte budget of the per-session tokenization cache (0: off).
    pub tokenizer_cache_bytes: usize,
    /// Path the health checker probes on each worker (`--health-check-endpoint`).
    pub health_check_endpoint: String,
    /// How long a registering worker may take to pass its first probe.
    pub worker_startup_timeout: Duration,
    /// `--dp-aware` was given (DP size is read from the worker either way).
    pub dp_aware: bool,
    /// `--prometheus-host:--prometheus-port`: a second listener serving only `/metrics`.
    pub prometheus: Option<(String, u16)>,
    /// `--prometheus-port` was given (flag or environment, or another port than 29000 in the
    /// file): a busy port stops the
    /// start; at the default port (29000) it is a warning, as several routers on one host
    /// (and tests) would otherwise clash over it.
    pub prometheus_port_given: bool,
    /// `--metrics-compat`: sgl-router / SMG series served beside `kvrouter_*`.
    pub metrics_compat: Option<crate::metrics::compat::Flavor>,
    /// etcd discovery (`--etcd-endpoints`; None when not given), see `crate::discovery`.
    pub etcd: Option<crate::discovery::EtcdConfig>,
    /// sgl-router compatibility warnings to log once at start (policy mapping, ignored flags).
    pub warnings: Vec<String>,
    /// Which client headers reach the workers (`--forward-request-header`).
    pub header_policy: crate::proxy::headers::HeaderPolicy,
    /// PD disaggregation (`--pd-disaggregation`; None when not given), see `crate::pd`.
    pub pd: Option<crate::pd::PdConfig>,
}

impl Default for Config {
    /// The validated declared defaults of [`Options`].
    fn default() -> Self {
        #[allow(clippy::expect_used)]
        Config::from_options(Options::default()).expect("declared defaults are valid")
    }
}

fn secs(field: &str, v: f64) -> Result<Duration, ConfigError> {
    match v {
        v if v.is_finite() && v > 0.0 && v < 1e9 => Ok(Duration::from_secs_f64(v)),
        v => Err(invalid(
            field,
            format!("must be a positive number of seconds (got {v})"),
        )),
    }
}

fn non_empty(field: &str, value: Option<String>) -> Result<Option<String>, ConfigError> {
    match value {
        Some(v) if v.trim().is_empty() => Err(invalid(field, "must not be empty when set")),
        v => Ok(v),
    }
}

impl Config {
    /// Parses the process arguments (and environment), reads `--config` if given, and validates.
    pub fn load() -> Result<Config, ConfigError> {
        use clap::Parser;
        Config::load_from(Cli::parse())
    }

    /// Reads `cli`'s `--config` file if given, merges and validates.
    pub fn load_from(cli: Cli) -> Result<Config, ConfigError> {
        let file = match cli.config_path() {
            Some(path) => FileConfig::load(path)?,
            None => FileConfig::default(),
        };
        Config::from_sources(cli, file)
    }

    /// Merges CLI/env values over file values over defaults, then validates.
    pub fn from_sources(cli: Cli, file: FileConfig) -> Result<Config, ConfigError> {
        let mode_given = cli.is_explicit("mode") || file.has("mode");
        let merged = file.under(&cli)?;
        // A file value equal to the default (the example file's) still counts as the default.
        let prometheus_port_given = cli.is_explicit("prometheus_port")
            || merged.prometheus_port != Options::default().prometheus_port;
        let mut config = Config::validate(merged, mode_given)?;
        config.prometheus_port_given = prometheus_port_given;
        config
            .warnings
            .extend(cli.ignored.iter().map(|i| compat::warning(i)));
        Ok(config)
    }

    /// Validates merged options (`mode` counts as given when it is not the default).
    pub fn from_options(o: Options) -> Result<Config, ConfigError> {
        let mode_given = o.mode != Options::default().mode;
        Config::validate(o, mode_given)
    }

    /// `mode` and `policy` into the routing mode and the mapping warning.
    fn mode(o: &Options, mode_given: bool) -> Result<(Mode, Option<String>), ConfigError> {
        let mode: Mode = o.mode.parse().map_err(|e: String| invalid("mode", e))?;
        let Some(policy) = &o.policy else {
            return Ok((mode, None));
        };
        let (mapped, warning) = Mode::from_policy(policy).map_err(|e| invalid("policy", e))?;
        if mode_given && mapped != mode {
            return Err(invalid(
                "policy",
                format!(
                    "--policy {policy} means --mode {mapped}, but --mode {mode} is also given; pass one"
                ),
            ));
        }
        Ok((mapped, warning))
    }

    /// Validates in a fixed order (the first problem found is the one reported): limits,
    /// bounds, retries, circuit breaker, mode, etcd, page size, allowed CIDRs, PD, worker
    /// URLs, the listeners and health checks, then the fields [`Config::assemble`] converts.
    fn validate(o: Options, mode_given: bool) -> Result<Config, ConfigError> {
        let limits = Limits::from_options(&o)?;
        let bounds = Bounds::from_options(&o)?;
        let retry_backoff = resilience::retry_backoff(&o)?;
        let circuit_breaker = resilience::circuit_breaker(&o)?;
        let retry_max_retries = resilience::retries_after_first(&o);
        let (mode, policy_warning) = Config::mode(&o, mode_given)?;
        let etcd = crate::discovery::EtcdConfig::from_options(&o)?;
        check_page_size(o.page_size)?;
        let worker_allow_cidr = allow_cidrs(&o.worker_allow_cidr)?;
        let (pd, pd_warnings) = crate::pd::PdConfig::from_options(&o, mode, &worker_allow_cidr)?;
        let (worker_urls, worker_credentials) = worker_urls(&o.worker_urls, &worker_allow_cidr)?;
        check_server(&o)?;
        let checked = Checked {
            mode,
            worker_urls,
            worker_allow_cidr,
            worker_credentials,
            retry_max_retries,
            retry_backoff,
            circuit_breaker,
            limits,
            bounds,
            etcd,
            warnings: policy_warning.into_iter().chain(pd_warnings).collect(),
            pd,
        };
        Config::assemble(o, checked)
    }

    /// The `Config` of checked options: the parts `validate` parsed, the rest converted here
    /// (timeouts, keys, KV, metrics compat, headers; their errors in field order).
    fn assemble(o: Options, c: Checked) -> Result<Config, ConfigError> {
        Ok(Config {
            mode: c.mode,
            page_size: o.page_size,
            worker_urls: c.worker_urls,
            worker_allow_cidr: c.worker_allow_cidr,
            worker_credentials: c.worker_credentials,
            host: o.host,
            port: o.port,
            request_timeout: secs("request_timeout_secs", o.request_timeout_secs)?,
            connect_timeout: secs("connect_timeout_secs", o.connect_timeout_secs)?,
            worker_idle_timeout: secs("worker_idle_timeout_secs", o.worker_idle_timeout_secs)?,
            health_check_interval: secs(
                "health_check_interval_secs",
                o.health_check_interval_secs,
            )?,
            health_check_timeout: secs("health_check_timeout_secs", o.health_check_timeout_secs)?,
            health_failure_threshold: o.health_failure_threshold,
            health_success_threshold: o.health_success_threshold,
            retry_max_retries: c.retry_max_retries,
            retry_backoff: c.retry_backoff,
            circuit_breaker: c.circuit_breaker,
            max_payload_size: o.max_payload_size,
            limits: c.limits,
            sticky_ttl: secs("sticky_ttl_secs", o.sticky_ttl_secs)?,
            bounds: c.bounds,
            api_key: non_empty("api_key", o.api_key)?,
            admin_api_key: non_empty("admin_api_key", o.admin_api_key)?,
            insecure_admin: o.insecure_admin,
            refit_queue_size: o.refit_queue_size,
            refit_refuse_when_paused: o.refit_refuse_when_paused,
            allow_version_mismatch: o.allow_version_mismatch,
            shutdown_grace_period: Duration::from_secs(o.shutdown_grace_period_secs),
            log_level: o.log_level,
            json_log: o.json_log,
            kv: KvConfig::from_options(&o.kv)?,
            tokenizer_path: o.tokenizer_path.or(o.model_path),
            tokenizer_cache_bytes: o.tokenizer_cache_mb.saturating_mul(1 << 20),
            health_check_endpoint: o.health_check_endpoint,
            worker_startup_timeout: secs(
                "worker_startup_timeout_secs",
                o.worker_startup_timeout_secs,
            )?,
            dp_aware: o.dp_aware,
            prometheus_port_given: o.prometheus_port != Options::default().prometheus_port,
            prometheus: (o.prometheus_port != 0).then_some((o.prometheus_host, o.prometheus_port)),
            metrics_compat: o
                .metrics_compat
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(|e: String| invalid("metrics_compat", e))?,
            etcd: c.etcd,
            header_policy: crate::proxy::headers::HeaderPolicy::with_extra(
                &o.forward_request_header,
            )
            .map_err(|e| invalid("forward_request_header", e))?,
            warnings: c.warnings,
            pd: c.pd,
        })
    }

    /// The key admin routes require: `admin_api_key`, else `api_key` (as in sgl-router, where
    /// admin routes fall back to the `--api-key` Bearer check), else none.
    pub fn effective_admin_key(&self) -> Option<&str> {
        self.admin_api_key.as_deref().or(self.api_key.as_deref())
    }

    /// True when `host` only accepts local connections: 127.0.0.0/8, ::1 or "localhost".
    pub fn host_is_loopback(&self) -> bool {
        self.host == "localhost"
            || self
                .host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// True when admin routes must refuse (403): no admin key (nor `--api-key`), a
    /// non-loopback bind and no `--insecure-admin`.
    pub fn admin_locked(&self) -> bool {
        self.effective_admin_key().is_none() && !self.insecure_admin && !self.host_is_loopback()
    }

    /// The one startup warning about admin access, if the configuration deserves one.
    pub fn admin_warning(&self) -> Option<String> {
        let host = &self.host;
        if self.admin_locked() {
            Some(format!(
                "admin routes are disabled (403): --host {host} is not loopback and no \
                 --admin-api-key is set; set --admin-api-key or pass --insecure-admin"
            ))
        } else if self.effective_admin_key().is_none() && !self.host_is_loopback() {
            Some(format!(
                "--insecure-admin: admin routes (flush, pause, weight updates, abort, worker \
                 removal) are open to anyone who can reach --host {host}"
            ))
        } else if self.admin_api_key.is_none() && self.api_key.is_some() {
            Some(
                "no --admin-api-key: every --api-key holder can use the admin routes \
                 (sgl-router semantics); set --admin-api-key to separate them"
                    .to_string(),
            )
        } else {
            None
        }
    }
}

/// What [`Config::validate`] parsed and checked before [`Config::assemble`] builds the rest.
struct Checked {
    mode: Mode,
    worker_urls: Vec<String>,
    worker_allow_cidr: Vec<ipnet::IpNet>,
    worker_credentials: Vec<(String, crate::workers::url::Credentials)>,
    retry_max_retries: u32,
    retry_backoff: crate::backoff::ExponentialBackoff,
    circuit_breaker: crate::workers::BreakerConfig,
    limits: Limits,
    bounds: Bounds,
    etcd: Option<crate::discovery::EtcdConfig>,
    warnings: Vec<String>,
    pd: Option<crate::pd::PdConfig>,
}

fn check_page_size(page_size: u32) -> Result<(), ConfigError> {
    if page_size < 1 {
        return Err(invalid(
            "page_size",
            format!("must be at least 1 (got {page_size})"),
        ));
    }
    Ok(())
}

/// `--worker-allow-cidr` values (each a space- or comma-separated list) as networks.
fn allow_cidrs(raw: &[String]) -> Result<Vec<ipnet::IpNet>, ConfigError> {
    let mut worker_allow_cidr = Vec::new();
    for raw in raw {
        for part in raw.split([' ', ',']).filter(|s| !s.is_empty()) {
            let net = part
                .parse::<ipnet::IpNet>()
                .map_err(|e| invalid("worker_allow_cidr", format!("{part:?}: {e}")))?;
            worker_allow_cidr.push(net);
        }
    }
    Ok(worker_allow_cidr)
}

/// Worker URLs, and the credentials some of them carried.
type WorkerUrls = (Vec<String>, Vec<(String, crate::workers::url::Credentials)>);

/// Worker URLs and their credentials of `--worker-urls` values (each whitespace-separated):
/// parsed, checked against `allow`, the first of each URL kept.
fn worker_urls(raw: &[String], allow: &[ipnet::IpNet]) -> Result<WorkerUrls, ConfigError> {
    let mut worker_urls = Vec::new();
    let mut worker_credentials = Vec::new();
    for raw in raw {
        for part in raw.split_whitespace().filter(|s| !s.is_empty()) {
            let shown = match part.rsplit_once('@') {
                Some((_, rest)) => format!("***@{rest}"),
                None => part.to_string(),
            };
            let addr = crate::workers::url::parse_worker_url(part)
                .map_err(|e| invalid("worker_urls", format!("{shown:?}: {e}")))?;
            crate::workers::url::check_worker_literal(&addr.host, allow)
                .map_err(|e| invalid("worker_urls", format!("{}: {e}", addr.url)))?;
            if let Some(c) = addr.credentials {
                if !worker_credentials.iter().any(|(u, _)| *u == addr.url) {
                    worker_credentials.push((addr.url.clone(), c));
                }
            }
            if !worker_urls.contains(&addr.url) {
                worker_urls.push(addr.url);
            }
        }
    }
    Ok((worker_urls, worker_credentials))
}

/// The listen host, health thresholds and endpoint, payload size, Prometheus host and log
/// level, in that order.
fn check_server(o: &Options) -> Result<(), ConfigError> {
    let host = &o.host;
    if host.parse::<std::net::IpAddr>().is_err() && host != "localhost" {
        return Err(invalid("host", format!("{host:?} is not an IP address")));
    }
    if o.health_failure_threshold == 0 {
        return Err(invalid("health_failure_threshold", "must be at least 1"));
    }
    if o.health_success_threshold == 0 {
        return Err(invalid("health_success_threshold", "must be at least 1"));
    }
    if o.max_payload_size == 0 {
        return Err(invalid("max_payload_size", "must be at least 1 byte"));
    }
    let health_check_endpoint = &o.health_check_endpoint;
    if !health_check_endpoint.starts_with('/') {
        return Err(invalid(
            "health_check_endpoint",
            format!("{health_check_endpoint:?} must start with /"),
        ));
    }
    if o.prometheus_port != 0
        && o.prometheus_host.parse::<std::net::IpAddr>().is_err()
        && o.prometheus_host != "localhost"
    {
        return Err(invalid(
            "prometheus_host",
            format!("{:?} is not an IP address", o.prometheus_host),
        ));
    }
    log_level::validated(&o.log_level).map_err(|e| invalid("log_level", e))?;
    Ok(())
}

#[cfg(test)]
mod tests;
