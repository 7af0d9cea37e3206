//! Router configuration: CLI flags, environment variables and a TOML file merged into one validated `Config`.
//!
//! Every option is declared once, in [`Options`] (options.rs; KV ones in kv.rs), which yields
//! its flag, `KVROUTER_*` variable, file key and default. Precedence: command line >
//! `KVROUTER_*` environment variable > `--config` file > default.
//! [`Config::from_sources`] merges and validates; every error names the offending field.

pub mod cli;
pub mod example;
pub mod file;
pub mod kv;
pub mod log_level;
mod mode;
pub mod options;

use std::time::Duration;

pub use cli::Cli;
pub use file::FileConfig;
pub use kv::{KvConfig, KvOptions};
pub use mode::Mode;
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
    pub worker_urls: Vec<String>,
    pub host: String,
    pub port: u16,
    /// Deadline for the worker's first response byte (not for the whole stream).
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    pub health_check_interval: Duration,
    pub health_check_timeout: Duration,
    pub health_failure_threshold: u32,
    pub health_success_threshold: u32,
    /// Extra attempts after the first one (0 = no retry).
    pub retry_max_retries: u32,
    pub retry_initial_backoff: Duration,
    pub retry_max_backoff: Duration,
    pub max_payload_size: usize,
    pub sticky_ttl: Duration,
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
    pub log_level: String,
    pub json_log: bool,
    /// KV-mode settings.
    pub kv: KvConfig,
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
        Config::from_options(file.under(&cli)?)
    }

    /// Validates merged options.
    pub fn from_options(o: Options) -> Result<Config, ConfigError> {
        let mode = o.mode.parse().map_err(|e: String| invalid("mode", e))?;
        let page_size = o.page_size;
        if page_size < 2 {
            return Err(invalid(
                "page_size",
                format!("must be at least 2 (got {page_size})"),
            ));
        }
        let mut worker_urls = Vec::new();
        for raw in &o.worker_urls {
            for part in raw.split_whitespace().filter(|s| !s.is_empty()) {
                let url = crate::workers::url::normalize_worker_url(part)
                    .map_err(|e| invalid("worker_urls", format!("{part:?}: {e}")))?;
                if !worker_urls.contains(&url) {
                    worker_urls.push(url);
                }
            }
        }
        let host = o.host;
        if host.parse::<std::net::IpAddr>().is_err() && host != "localhost" {
            return Err(invalid("host", format!("{host:?} is not an IP address")));
        }
        if o.health_failure_threshold == 0 {
            return Err(invalid("health_failure_threshold", "must be at least 1"));
        }
        if o.health_success_threshold == 0 {
            return Err(invalid("health_success_threshold", "must be at least 1"));
        }
        let retry_initial_backoff = Duration::from_millis(o.retry_initial_backoff_ms);
        let retry_max_backoff = Duration::from_millis(o.retry_max_backoff_ms);
        if retry_max_backoff < retry_initial_backoff {
            return Err(invalid(
                "retry_max_backoff_ms",
                "must not be smaller than retry_initial_backoff_ms",
            ));
        }
        if o.max_payload_size == 0 {
            return Err(invalid("max_payload_size", "must be at least 1 byte"));
        }
        let log_level = o.log_level;
        if tracing_subscriber::EnvFilter::try_new(&log_level).is_err() {
            return Err(invalid(
                "log_level",
                format!("{log_level:?} is not a log filter"),
            ));
        }
        Ok(Config {
            mode,
            page_size,
            worker_urls,
            host,
            port: o.port,
            request_timeout: secs("request_timeout_secs", o.request_timeout_secs)?,
            connect_timeout: secs("connect_timeout_secs", o.connect_timeout_secs)?,
            health_check_interval: secs(
                "health_check_interval_secs",
                o.health_check_interval_secs,
            )?,
            health_check_timeout: secs("health_check_timeout_secs", o.health_check_timeout_secs)?,
            health_failure_threshold: o.health_failure_threshold,
            health_success_threshold: o.health_success_threshold,
            retry_max_retries: o.retry_max_retries,
            retry_initial_backoff,
            retry_max_backoff,
            max_payload_size: o.max_payload_size,
            sticky_ttl: secs("sticky_ttl_secs", o.sticky_ttl_secs)?,
            api_key: non_empty("api_key", o.api_key)?,
            admin_api_key: non_empty("admin_api_key", o.admin_api_key)?,
            insecure_admin: o.insecure_admin,
            refit_queue_size: o.refit_queue_size,
            refit_refuse_when_paused: o.refit_refuse_when_paused,
            allow_version_mismatch: o.allow_version_mismatch,
            log_level,
            json_log: o.json_log,
            kv: KvConfig::from_options(&o.kv)?,
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

#[cfg(test)]
mod tests;
