//! `WorkerSpec`: what a caller asks for when registering a worker (sgl-router 0.3's
//! `WorkerConfigRequest` without the url); unknown fields are ignored.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Registration options for one worker. Every field is optional.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkerSpec {
    /// `"regular"` (default), `"prefill"` or `"decode"`.
    pub worker_type: Option<String>,
    /// Sent as `Authorization: Bearer <key>` on every call to this worker (`Debug` prints `***`).
    pub api_key: Option<String>,
    /// Model id override (else the worker's served model name).
    pub model_id: Option<String>,
    /// sgl-router priority (reported only).
    pub priority: Option<u32>,
    /// sgl-router cost (reported only).
    pub cost: Option<f32>,
    /// PD bootstrap port (reported only).
    pub bootstrap_port: Option<u16>,
    /// Free-form labels (reported; selectors in the RL routes match on them).
    pub labels: BTreeMap<String, String>,
    /// Skip periodic health checks for this worker (it stays healthy unless the data
    /// plane reports failures).
    pub disable_health_check: bool,
}

impl WorkerSpec {
    /// The worker type as reported in JSON (`"regular"` when unset).
    pub fn worker_type(&self) -> &str {
        self.worker_type.as_deref().unwrap_or("regular")
    }
}

/// Body of `POST /workers`: `{"url": ..., <WorkerSpec fields>}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerConfigRequest {
    /// Base URL of the worker, e.g. `http://10.0.0.5:30000`.
    pub url: String,
    /// Everything else.
    #[serde(flatten)]
    pub spec: WorkerSpec,
}

impl std::fmt::Debug for WorkerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerSpec")
            .field("worker_type", &self.worker_type)
            .field("api_key", &self.api_key.as_ref().map(|_| "***"))
            .field("model_id", &self.model_id)
            .field("priority", &self.priority)
            .field("cost", &self.cost)
            .field("bootstrap_port", &self.bootstrap_port)
            .field("labels", &self.labels)
            .field("disable_health_check", &self.disable_health_check)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn miles_post_workers_body_parses() {
        let req: WorkerConfigRequest = serde_json::from_str(
            r#"{"url":"http://h:1","worker_type":"prefill","bootstrap_port":8998,"unknown":{"x":1},
                "labels":{"pool":"a"},"health_check_timeout_secs":30}"#,
        )
        .expect("valid body");
        assert_eq!(req.url, "http://h:1");
        assert_eq!(req.spec.worker_type(), "prefill");
        assert_eq!(req.spec.bootstrap_port, Some(8998));
        assert_eq!(req.spec.labels.get("pool").map(String::as_str), Some("a"));
        assert_eq!(WorkerSpec::default().worker_type(), "regular");
    }

    #[test]
    fn debug_hides_the_api_key() {
        let s = WorkerSpec {
            api_key: Some("s3cret".into()),
            ..WorkerSpec::default()
        };
        let printed = format!("{s:?}");
        assert!(
            !printed.contains("s3cret") && printed.contains("***"),
            "{printed}"
        );
    }
}
