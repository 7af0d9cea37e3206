//! The JSON values stored under the discovery keys: [`WorkerRecord`] (what `router register`
//! writes, what routers turn into a registration) and [`RouterRecord`] (what a router replica
//! writes about itself). A worker record never holds a secret: a worker API key is named by
//! the router-side environment variable that holds it (`api_key_env`), and only variables
//! named `KVROUTER_WORKER_API_KEY*` may be named, so whoever can write to etcd cannot make a
//! router send its other secrets to an address of their choosing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::workers::WorkerSpec;

/// The environment variables a worker record may name as its API key.
pub(crate) const API_KEY_ENV_PREFIX: &str = "KVROUTER_WORKER_API_KEY";

/// The value of `<prefix>/workers/<id>`. Unknown fields are ignored (newer writers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerRecord {
    /// The worker's base URL as routers reach it (`http://10.0.0.5:30000`), no credentials.
    pub url: String,
    /// Served model name the worker reported when it was registered (the router still reads
    /// the worker's own info; this is used as the registration's `model_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// DP size the worker reported when it was registered (informational: the router reads
    /// the worker's own `dp_size` in its registration probe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dp_size: Option<u32>,
    /// `regular` (default), `prefill` or `decode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_type: Option<String>,
    /// A prefill worker's PD bootstrap port (`--disaggregation-bootstrap-port`), sent to both
    /// legs as `bootstrap_port` (null when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_port: Option<u16>,
    /// Name of the router-side environment variable holding this worker's API key
    /// (`KVROUTER_WORKER_API_KEY*`); never the key itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Free-form labels (shown in `/workers`, matched by the RL selectors).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// The value of `<prefix>/routers/<id>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouterRecord {
    /// Router replica id (a UUID chosen at start; also the key's last segment).
    pub id: String,
    /// Where the replica serves (`--etcd-advertise-url`, else `http://host:port`).
    pub url: String,
    /// Routing mode (`kv`, `round-robin`, ...).
    pub mode: String,
    /// kvrouter version.
    pub version: String,
    /// Start time, seconds since the Unix epoch.
    pub started_at: u64,
}

/// Checks a variable name a record may name as its API key.
pub(crate) fn check_api_key_env(name: &str) -> Result<(), String> {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if !name.starts_with(API_KEY_ENV_PREFIX) || !ok_chars {
        return Err(format!(
            "api_key_env {name:?} must be an environment variable named {API_KEY_ENV_PREFIX}* \
             (A-Z, 0-9, _)"
        ));
    }
    Ok(())
}

impl WorkerRecord {
    /// Parses and validates a stored value: JSON, an `http://` URL without credentials, a
    /// permitted `api_key_env`. The error says why (logged by the watcher, which skips the key).
    pub fn parse(value: &[u8]) -> Result<WorkerRecord, String> {
        let mut record: WorkerRecord =
            serde_json::from_slice(value).map_err(|e| format!("not a worker record: {e}"))?;
        let addr =
            crate::workers::url::parse_worker_url(&record.url).map_err(|e| format!("url: {e}"))?;
        if addr.credentials.is_some() {
            return Err("url: credentials do not belong in etcd (use api_key_env)".to_string());
        }
        record.url = addr.url;
        if let Some(name) = &record.api_key_env {
            check_api_key_env(name)?;
        }
        Ok(record)
    }

    /// The registration this record asks for. `env` looks up the API key variable (the
    /// process environment in the router); a named variable that is unset is an error.
    pub fn spec(
        &self,
        key: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<WorkerSpec, String> {
        let api_key = match &self.api_key_env {
            Some(name) => Some(env(name).filter(|v| !v.is_empty()).ok_or_else(|| {
                format!("api_key_env {name} is not set in this router's environment")
            })?),
            None => None,
        };
        let mut labels = self.labels.clone();
        labels.insert("discovery".to_string(), "etcd".to_string());
        labels.insert("etcd_key".to_string(), key.to_string());
        Ok(WorkerSpec {
            worker_type: self.worker_type.clone(),
            bootstrap_port: self.bootstrap_port,
            api_key,
            model_id: self.model.clone(),
            labels,
            ..WorkerSpec::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_validates() {
        let r = WorkerRecord::parse(
            br#"{"url":"http://10.0.0.5:30000/","model":"m","dp_size":2,"future":1}"#,
        )
        .unwrap();
        assert_eq!(r.url, "http://10.0.0.5:30000");
        assert_eq!(r.dp_size, Some(2));
        assert!(WorkerRecord::parse(b"not json").is_err());
        assert!(WorkerRecord::parse(br#"{"model":"m"}"#).is_err());
        assert!(WorkerRecord::parse(br#"{"url":"http://u:p@h:1"}"#).is_err());
        assert!(WorkerRecord::parse(br#"{"url":"h:1","api_key_env":"HOME"}"#).is_err());
        assert!(
            WorkerRecord::parse(br#"{"url":"http://h:1","api_key_env":"KVROUTER_API_KEY"}"#)
                .is_err()
        );
    }

    #[test]
    fn spec_resolves_the_key_reference() {
        let r = WorkerRecord::parse(
            br#"{"url":"http://h:1","api_key_env":"KVROUTER_WORKER_API_KEY_A","worker_type":"prefill","bootstrap_port":8998}"#,
        )
        .unwrap();
        let spec = r
            .spec("/k/workers/h:1", |n| {
                (n == "KVROUTER_WORKER_API_KEY_A").then(|| "s3cret".to_string())
            })
            .unwrap();
        assert_eq!(spec.api_key.as_deref(), Some("s3cret"));
        assert_eq!(spec.worker_type(), "prefill");
        assert_eq!(spec.bootstrap_port, Some(8998));
        assert_eq!(spec.labels["discovery"], "etcd");
        assert!(r.spec("k", |_| None).is_err());
        // The serialized record never carries a key value, only its name.
        let text = serde_json::to_string(&r).unwrap();
        assert!(!text.contains("s3cret") && text.contains("KVROUTER_WORKER_API_KEY_A"));
    }
}
