//! JSON views of the fleet in sgl-router's shapes (`GET /workers`, `GET /workers/{id}`,
//! `GET /list_workers`), with kvrouter's extra fields added alongside.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use super::job::{Job, JobStatus};
use super::worker::Worker;

impl Worker {
    /// The sgl-router `WorkerInfo` JSON shape plus kvrouter fields ([`worker_json`]).
    pub fn to_json(&self) -> Value {
        worker_json(self)
    }
}

/// One worker: sgl-router 0.3 `WorkerInfo` fields, then kvrouter fields.
pub(crate) fn worker_json(w: &Worker) -> Value {
    let spec = &w.spec;
    let info = &w.info;
    json!({
        // sgl-router 0.3 shape
        "id": w.public_id,
        "url": w.url,
        "model_id": w.model_id().unwrap_or("unknown"),
        "priority": spec.priority.unwrap_or(50),
        "cost": spec.cost.unwrap_or(1.0),
        "worker_type": spec.worker_type(),
        "is_healthy": w.is_healthy(),
        "load": w.in_flight(),
        "connection_mode": "http",
        "runtime_type": "sglang",
        "bootstrap_port": spec.bootstrap_port,
        "metadata": {"labels": spec.labels},
        "disable_health_check": spec.disable_health_check,
        // kvrouter additions
        "worker_key": w.id.to_string(),
        "routable": w.is_routable(),
        "circuit_state": w.circuit_state().as_str(),
        "in_flight": w.in_flight(),
        "draining": w.is_draining(),
        "paused": w.is_paused(),
        "awaiting_refit": w.is_awaiting_refit(),
        "incompatible": w.is_incompatible(),
        "consecutive_failures": w.consecutive_failures(),
        "weight_version": w.weight_version(),
        "incarnation": w.incarnation(),
        "reported_load": w.reported_load(),
        "page_size": info.page_size,
        "dp_size": info.dp_size,
        "tp_size": info.tp_size,
        "gpu_count": info.gpu_count(),
        "kv_events_config": info.kv_events,
        "max_total_num_tokens": info.max_total_num_tokens,
        "max_running_requests": info.max_running_requests,
        "registered_at": unix_secs(w.registered_at),
    })
}

/// A registration that has no worker yet (pending) or never got one (failed).
pub(super) fn job_json(j: &Job) -> Value {
    let (status, message) = match &j.status {
        JobStatus::Pending => (
            "pending",
            "Worker addition queued for background processing".to_string(),
        ),
        JobStatus::Failed(m) => ("failed", m.clone()),
    };
    json!({
        "id": j.public_id,
        "url": j.url,
        "model_id": j.spec.model_id.as_deref().unwrap_or("unknown"),
        "priority": j.spec.priority.unwrap_or(50),
        "cost": j.spec.cost.unwrap_or(1.0),
        "worker_type": j.spec.worker_type(),
        "is_healthy": false,
        "load": 0,
        "connection_mode": "http",
        "runtime_type": "sglang",
        "bootstrap_port": j.spec.bootstrap_port,
        "metadata": {"labels": j.spec.labels},
        "disable_health_check": j.spec.disable_health_check,
        "worker_key": j.id.to_string(),
        "routable": false,
        "job_status": {
            "job_type": "AddWorker",
            "worker_url": j.url,
            "status": status,
            "message": message,
            "timestamp": unix_secs(j.since),
        },
    })
}

/// `GET /workers` envelope of registered workers.
pub(super) fn workers_json(workers: &[Arc<Worker>]) -> Value {
    let list: Vec<Value> = workers.iter().map(|w| worker_json(w)).collect();
    let count = |t: &str| workers.iter().filter(|w| w.spec.worker_type() == t).count();
    json!({
        "workers": list,
        "total": workers.len(),
        "stats": {
            "prefill_count": count("prefill"),
            "decode_count": count("decode"),
            "regular_count": count("regular"),
        },
    })
}

/// `GET /list_workers`: `{"urls": [...]}` of registered workers.
pub(super) fn list_workers_json(workers: &[Arc<Worker>]) -> Value {
    json!({"urls": workers.iter().map(|w| w.url.as_str()).collect::<Vec<_>>()})
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::worker::test_worker;

    #[test]
    fn sgl_router_shapes() {
        let w = Arc::new(test_worker(3, "http://127.0.0.1:1"));
        w.begin_request();
        let v = workers_json(std::slice::from_ref(&w));
        assert_eq!(v["total"], 1);
        assert_eq!(v["stats"]["regular_count"], 1);
        let e = &v["workers"][0];
        assert_eq!(e["id"], "uuid-3");
        assert_eq!(e["worker_key"], "w3");
        assert_eq!(e["url"], "http://127.0.0.1:1");
        assert_eq!(e["is_healthy"], true);
        assert_eq!(e["load"], 1);
        assert_eq!(e["worker_type"], "regular");
        assert_eq!(e["page_size"], 1);
        assert!(e["kv_events_config"].is_null());
        assert_eq!(
            list_workers_json(&[w]),
            json!({"urls": ["http://127.0.0.1:1"]})
        );
    }
}
