//! The `--config` TOML file: the same keys as the long flags (snake_case), all optional.
//! Unknown keys are rejected so a typo fails at start instead of being silently ignored.

use std::path::Path;

use serde::Deserialize;

use super::ConfigError;

/// Raw contents of a configuration file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub mode: Option<String>,
    pub page_size: Option<u32>,
    pub worker_urls: Option<Vec<String>>,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub request_timeout_secs: Option<f64>,
    pub connect_timeout_secs: Option<f64>,
    pub health_check_interval_secs: Option<f64>,
    pub health_check_timeout_secs: Option<f64>,
    pub health_failure_threshold: Option<u32>,
    pub health_success_threshold: Option<u32>,
    pub retry_max_retries: Option<u32>,
    pub retry_initial_backoff_ms: Option<u64>,
    pub retry_max_backoff_ms: Option<u64>,
    pub max_payload_size: Option<usize>,
    pub sticky_ttl_secs: Option<f64>,
    pub api_key: Option<String>,
    pub admin_api_key: Option<String>,
    pub refit_queue_size: Option<usize>,
    pub refit_refuse_when_paused: Option<bool>,
    pub allow_version_mismatch: Option<bool>,
    pub log_level: Option<String>,
    pub json_log: Option<bool>,
    /// KV-mode settings (`[kv]` table, see src/config/kv.rs).
    pub kv: Option<super::kv::KvFile>,
}

impl FileConfig {
    /// Reads and parses `path`; errors name the file and the offending key.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            field: "config".into(),
            message: format!("cannot read {}: {e}", path.display()),
        })?;
        Self::parse(&text).map_err(|e| ConfigError {
            field: e.field,
            message: format!("{} (in {})", e.message, path.display()),
        })
    }

    /// Parses TOML text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError {
            field: "config".into(),
            message: e.message().trim().to_string(),
        })
    }
}
