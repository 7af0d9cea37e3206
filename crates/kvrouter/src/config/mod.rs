//! Router configuration: CLI flags, environment variables and a TOML file merged into one validated `Config`.
//!
//! Every option is declared once, in [`Options`] (options.rs; KV ones in kv.rs), which yields
//! its flag, `KVROUTER_*` variable, file key and default. Precedence: command line >
//! `KVROUTER_*` environment variable > `--config` file > default.
//! [`Config::from_sources`] merges and validates; every error names the offending field.

pub(crate) mod bounds;
pub(crate) mod cli;
pub mod compat;
mod declared;
pub mod env_check;
mod etcd;
pub mod example;
pub(crate) mod file;
pub(crate) mod kv;
pub(crate) mod limits;
pub(crate) mod listener;
pub(crate) mod options;
mod pd;
mod resilience;
pub(crate) mod sources;

use std::time::Duration;

pub use crate::log_level;
pub use crate::routing::Mode;
pub use bounds::Bounds;
pub use cli::Cli;
pub use file::FileConfig;
pub use kv::{KvConfig, KvOptions, PredictCredit};
pub use limits::Limits;
pub use listener::ServerSettings;
pub use options::Options;
pub use sources::WorkerSources;

pub use crate::log_level::LogSettings;
pub use crate::proxy::client::UpstreamSettings;
use crate::proxy::retry::RetrySettings;
use crate::refit::RefitConfig;
pub use crate::text::TextSettings;
use crate::workers::HealthSettings;

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

/// The validated router configuration, one part per concern.
#[derive(Debug, Clone)]
pub struct Config {
    pub mode: Mode,
    pub page_size: u32,
    /// Where the workers come from: URLs, credentials, allowed networks, etcd, PD lists.
    pub workers: WorkerSources,
    /// The listeners, their keys and the shutdown grace.
    pub server: ServerSettings,
    /// Calls to the workers: first-byte deadline, connect timeout, pooled connections' idle time.
    pub upstream: UpstreamSettings,
    /// Health checks and the startup probe's patience.
    pub health: HealthSettings,
    /// Retries, their backoff and the circuit breaker.
    pub retry: RetrySettings,
    /// Server and data-plane resource limits (docs/router.md, "Limits").
    pub limits: Limits,
    pub sticky_ttl: Duration,
    /// Bounds on client-grown state (sticky keys, request bodies in flight).
    pub bounds: Bounds,
    /// The refit gate: held requests, refusal while paused, hold and call deadlines.
    pub refit: RefitConfig,
    /// Route to workers whose weight version differs from the fleet's (no `awaiting_refit` hold).
    pub allow_version_mismatch: bool,
    /// `--log-level` and `--json-log`.
    pub log: LogSettings,
    /// KV-mode settings.
    pub kv: KvConfig,
    /// Text requests' tokenizer and its per-session cache.
    pub text: TextSettings,
    /// `--metrics-compat`: sgl-router / SMG series served beside `kvrouter_*`.
    pub metrics_compat: Option<crate::metrics::compat::Flavor>,
    /// sgl-router compatibility warnings to log once at start (policy mapping, ignored flags).
    pub warnings: Vec<String>,
    /// Which client headers reach the workers (`--forward-request-header`).
    pub header_policy: crate::proxy::headers::HeaderPolicy,
}

impl Default for Config {
    /// The validated declared defaults of [`Options`].
    fn default() -> Self {
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
        let prefill_weight_given =
            cli.is_explicit("kv_prefill_weight") || prefill_weight_set(&merged);
        let mut config = Config::validate(merged, mode_given)?.pd_kv_defaults(prefill_weight_given);
        config.server.prometheus_port_given = prometheus_port_given;
        config
            .warnings
            .extend(cli.ignored.iter().map(|i| compat::warning(i)));
        Ok(config)
    }

    /// Validates merged options (`mode` counts as given when it is not the default).
    pub fn from_options(o: Options) -> Result<Config, ConfigError> {
        let mode_given = o.mode != Options::default().mode;
        let prefill_weight_given = prefill_weight_set(&o);
        Ok(Config::validate(o, mode_given)?.pd_kv_defaults(prefill_weight_given))
    }

    /// A PD router's KV policy places the prefill leg: its prefill weight defaults to
    /// [`crate::pd::PD_PREFILL_WEIGHT`] unless the flag, the environment or a non-default file
    /// value sets one.
    fn pd_kv_defaults(mut self, prefill_weight_given: bool) -> Config {
        if self.workers.pd.is_some() && !prefill_weight_given {
            self.kv.prefill_weight = crate::pd::PD_PREFILL_WEIGHT;
        }
        self
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
        let backoff = resilience::retry_backoff(&o)?;
        let breaker = resilience::circuit_breaker(&o)?;
        let max_retries = resilience::retries_after_first(&o);
        let (mode, policy_warning) = Config::mode(&o, mode_given)?;
        let etcd = crate::discovery::EtcdConfig::from_options(&o)?;
        check_page_size(o.page_size)?;
        let allow_cidr = sources::allow_cidrs(&o.worker_allow_cidr)?;
        let (pd, pd_warnings) = crate::pd::PdConfig::from_options(&o, mode, &allow_cidr)?;
        let (urls, credentials) = sources::worker_urls(&o.worker_urls, &allow_cidr)?;
        check_server(&o)?;
        let checked = Checked {
            mode,
            workers: WorkerSources {
                urls,
                credentials,
                allow_cidr,
                etcd,
                pd,
            },
            retry: RetrySettings {
                max_retries,
                backoff,
                breaker,
            },
            limits,
            bounds,
            warnings: policy_warning
                .into_iter()
                .chain(pd_warnings)
                .chain(kv_weight_warning(&o, mode))
                .collect(),
        };
        Config::assemble(o, checked)
    }

    /// The `Config` of checked options: the parts `validate` parsed, the rest converted here
    /// (timeouts, keys, KV, metrics compat, headers; their errors in field order).
    fn assemble(o: Options, c: Checked) -> Result<Config, ConfigError> {
        let upstream = UpstreamSettings {
            request_timeout: secs("request_timeout_secs", o.request_timeout_secs)?,
            connect_timeout: secs("connect_timeout_secs", o.connect_timeout_secs)?,
            idle_timeout: secs("worker_idle_timeout_secs", o.worker_idle_timeout_secs)?,
        };
        let interval = secs("health_check_interval_secs", o.health_check_interval_secs)?;
        let timeout = secs("health_check_timeout_secs", o.health_check_timeout_secs)?;
        let sticky_ttl = secs("sticky_ttl_secs", o.sticky_ttl_secs)?;
        let server = Config::server(&o)?;
        let kv = KvConfig::from_options(&o.kv)?;
        let health = HealthSettings {
            interval,
            timeout,
            failure_threshold: o.health_failure_threshold,
            success_threshold: o.health_success_threshold,
            endpoint: o.health_check_endpoint.clone(),
            startup_timeout: secs("worker_startup_timeout_secs", o.worker_startup_timeout_secs)?,
        };
        Ok(Config {
            mode: c.mode,
            page_size: o.page_size,
            workers: c.workers,
            server,
            refit: RefitConfig {
                queue_size: o.refit_queue_size,
                refuse_when_paused: o.refit_refuse_when_paused,
                max_hold: upstream.request_timeout,
                call_timeout: upstream.request_timeout,
                drain_timeout: upstream.request_timeout,
            },
            upstream,
            health,
            retry: c.retry,
            limits: c.limits,
            sticky_ttl,
            bounds: c.bounds,
            allow_version_mismatch: o.allow_version_mismatch,
            kv,
            metrics_compat: o
                .metrics_compat
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(|e: String| invalid("metrics_compat", e))?,
            header_policy: crate::proxy::headers::HeaderPolicy::with_extra(
                &o.forward_request_header,
            )
            .map_err(|e| invalid("forward_request_header", e))?,
            warnings: c.warnings,
            text: TextSettings {
                tokenizer_path: o.tokenizer_path.or(o.model_path),
                cache_bytes: o.tokenizer_cache_mb.saturating_mul(1 << 20),
            },
            log: LogSettings {
                level: o.log_level,
                json: o.json_log,
            },
        })
    }

    /// The listener settings of `o` (the API and admin keys refused when blank).
    fn server(o: &Options) -> Result<ServerSettings, ConfigError> {
        let port_given = o.prometheus_port != Options::default().prometheus_port;
        Ok(ServerSettings {
            host: o.host.clone(),
            port: o.port,
            api_key: non_empty("api_key", o.api_key.clone())?,
            admin_api_key: non_empty("admin_api_key", o.admin_api_key.clone())?,
            insecure_admin: o.insecure_admin,
            shutdown_grace_period: Duration::from_secs(o.shutdown_grace_period_secs),
            prometheus: (o.prometheus_port != 0)
                .then(|| (o.prometheus_host.clone(), o.prometheus_port)),
            prometheus_port_given: port_given,
        })
    }

    /// The key admin routes require ([`ServerSettings::effective_admin_key`]).
    pub fn effective_admin_key(&self) -> Option<&str> {
        self.server.effective_admin_key()
    }

    /// True when admin routes must refuse (403), see [`ServerSettings::admin_locked`].
    pub fn admin_locked(&self) -> bool {
        self.server.admin_locked()
    }

    /// The one startup warning about admin access ([`ServerSettings::admin_warning`]).
    pub fn admin_warning(&self) -> Option<String> {
        self.server.admin_warning()
    }
}

/// What [`Config::validate`] parsed and checked before [`Config::assemble`] builds the rest.
struct Checked {
    mode: Mode,
    workers: WorkerSources,
    retry: RetrySettings,
    limits: Limits,
    bounds: Bounds,
    warnings: Vec<String>,
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

/// Whether `--kv-prefill-weight` differs from its declared default (a file value equal to it
/// counts as the default, as the example file's does).
fn prefill_weight_set(o: &Options) -> bool {
    o.kv.kv_prefill_weight != kv::KvOptions::default().kv_prefill_weight
}

/// A KV router told to ignore the context in flight (`--kv-decode-weight 0`) sends every
/// request that shares a prefix (a system prompt) to the worker holding it, whatever its load
/// (measured in docs/pd.md "Prefill weight": agent TTFT p50 34 s); accepted, with this warning.
fn kv_weight_warning(o: &Options, mode: Mode) -> Option<String> {
    (mode == Mode::Kv && o.kv.kv_decode_weight == 0.0).then(|| {
        "--kv-decode-weight 0 ignores the work in flight on each worker: requests that share a \
         prefix all go to the worker holding it, however loaded (docs/kv-routing.md)"
            .to_string()
    })
}

#[cfg(test)]
mod tests;
