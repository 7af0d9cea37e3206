//! Router configuration: CLI flags, environment variables and a TOML file merged into one validated `Config`.
//!
//! Precedence: command line > `KVROUTER_*` environment variable > `--config` file > default.
//! [`Config::from_sources`] merges and validates; every error names the offending field.

pub mod cli;
pub mod file;
pub mod kv;
mod mode;

use std::time::Duration;

pub use cli::Cli;
pub use file::FileConfig;
pub use kv::KvConfig;
pub use mode::Mode;

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
    fn default() -> Self {
        Config {
            mode: Mode::Kv,
            page_size: 16,
            worker_urls: Vec::new(),
            host: "127.0.0.1".into(),
            port: 30000,
            request_timeout: Duration::from_secs(1800),
            connect_timeout: Duration::from_secs(5),
            health_check_interval: Duration::from_secs(10),
            health_check_timeout: Duration::from_secs(5),
            health_failure_threshold: 3,
            health_success_threshold: 2,
            retry_max_retries: 2,
            retry_initial_backoff: Duration::from_millis(50),
            retry_max_backoff: Duration::from_millis(2000),
            max_payload_size: 512 * 1024 * 1024,
            sticky_ttl: Duration::from_secs(14400),
            api_key: None,
            admin_api_key: None,
            refit_queue_size: 4096,
            refit_refuse_when_paused: false,
            allow_version_mismatch: false,
            log_level: "info".into(),
            json_log: false,
            kv: KvConfig::default(),
        }
    }
}

fn secs(field: &str, value: Option<f64>, default: Duration) -> Result<Duration, ConfigError> {
    match value {
        None => Ok(default),
        Some(v) if v.is_finite() && v > 0.0 && v < 1e9 => Ok(Duration::from_secs_f64(v)),
        Some(v) => Err(invalid(
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
        let cli = Cli::parse();
        let file = match &cli.config {
            Some(path) => FileConfig::load(path)?,
            None => FileConfig::default(),
        };
        Config::from_sources(cli, file)
    }

    /// Merges CLI/env values over file values over defaults, then validates.
    pub fn from_sources(cli: Cli, file: FileConfig) -> Result<Config, ConfigError> {
        let d = Config::default();
        macro_rules! pick {
            ($f:ident) => {
                cli.$f.clone().or(file.$f.clone())
            };
        }
        let mode = match pick!(mode) {
            None => d.mode,
            Some(m) => m.parse().map_err(|e: String| invalid("mode", e))?,
        };
        let page_size = pick!(page_size).unwrap_or(d.page_size);
        if page_size < 2 {
            return Err(invalid(
                "page_size",
                format!("must be at least 2 (got {page_size})"),
            ));
        }
        let mut worker_urls = Vec::new();
        for raw in pick!(worker_urls).unwrap_or_default() {
            for part in raw.split_whitespace().filter(|s| !s.is_empty()) {
                let url = crate::workers::url::normalize_worker_url(part)
                    .map_err(|e| invalid("worker_urls", format!("{part:?}: {e}")))?;
                if !worker_urls.contains(&url) {
                    worker_urls.push(url);
                }
            }
        }
        let host = pick!(host).unwrap_or(d.host);
        if host.parse::<std::net::IpAddr>().is_err() && host != "localhost" {
            return Err(invalid("host", format!("{host:?} is not an IP address")));
        }
        let health_failure_threshold =
            pick!(health_failure_threshold).unwrap_or(d.health_failure_threshold);
        if health_failure_threshold == 0 {
            return Err(invalid("health_failure_threshold", "must be at least 1"));
        }
        let health_success_threshold =
            pick!(health_success_threshold).unwrap_or(d.health_success_threshold);
        if health_success_threshold == 0 {
            return Err(invalid("health_success_threshold", "must be at least 1"));
        }
        let retry_initial_backoff = Duration::from_millis(
            pick!(retry_initial_backoff_ms).unwrap_or(d.retry_initial_backoff.as_millis() as u64),
        );
        let retry_max_backoff = Duration::from_millis(
            pick!(retry_max_backoff_ms).unwrap_or(d.retry_max_backoff.as_millis() as u64),
        );
        if retry_max_backoff < retry_initial_backoff {
            return Err(invalid(
                "retry_max_backoff_ms",
                "must not be smaller than retry_initial_backoff_ms",
            ));
        }
        let max_payload_size = pick!(max_payload_size).unwrap_or(d.max_payload_size);
        if max_payload_size == 0 {
            return Err(invalid("max_payload_size", "must be at least 1 byte"));
        }
        let log_level = pick!(log_level).unwrap_or(d.log_level);
        if tracing_subscriber::EnvFilter::try_new(&log_level).is_err() {
            return Err(invalid(
                "log_level",
                format!("{log_level:?} is not a log filter"),
            ));
        }
        let api_key = non_empty("api_key", pick!(api_key))?;
        let admin_api_key = non_empty("admin_api_key", pick!(admin_api_key))?;
        Ok(Config {
            mode,
            page_size,
            worker_urls,
            host,
            port: pick!(port).unwrap_or(d.port),
            request_timeout: secs(
                "request_timeout_secs",
                pick!(request_timeout_secs),
                d.request_timeout,
            )?,
            connect_timeout: secs(
                "connect_timeout_secs",
                pick!(connect_timeout_secs),
                d.connect_timeout,
            )?,
            health_check_interval: secs(
                "health_check_interval_secs",
                pick!(health_check_interval_secs),
                d.health_check_interval,
            )?,
            health_check_timeout: secs(
                "health_check_timeout_secs",
                pick!(health_check_timeout_secs),
                d.health_check_timeout,
            )?,
            health_failure_threshold,
            health_success_threshold,
            retry_max_retries: pick!(retry_max_retries).unwrap_or(d.retry_max_retries),
            retry_initial_backoff,
            retry_max_backoff,
            max_payload_size,
            sticky_ttl: secs("sticky_ttl_secs", pick!(sticky_ttl_secs), d.sticky_ttl)?,
            api_key,
            admin_api_key,
            refit_queue_size: pick!(refit_queue_size).unwrap_or(d.refit_queue_size),
            refit_refuse_when_paused: pick!(refit_refuse_when_paused)
                .unwrap_or(d.refit_refuse_when_paused),
            allow_version_mismatch: pick!(allow_version_mismatch)
                .unwrap_or(d.allow_version_mismatch),
            log_level,
            json_log: pick!(json_log).unwrap_or(d.json_log),
            kv: KvConfig::from_sources(&cli.kv, &file.kv.clone().unwrap_or_default())?,
        })
    }

    /// The key admin routes require: `admin_api_key`, else `api_key`, else none.
    pub fn effective_admin_key(&self) -> Option<&str> {
        self.admin_api_key.as_deref().or(self.api_key.as_deref())
    }
}

#[cfg(test)]
mod tests;
