//! SMG-compatible RL routes (what `smg.rl.RL` calls), over the same refit engine as the
//! native routes, so a pause here closes kvrouter's gate and `weight_version` follows updates:
//! - `GET /v1/rl/workers`, `GET /v1/rl/workers/{id}`;
//! - `ANY /v1/rl/workers/{id}/engine/{path}`: one worker, answered as
//!   `{worker_id, url, status, latency_ms, body}` with the worker's status;
//! - `ANY /v1/rl/engine/{path}?selector=...`: fan-out by label selector, answered
//!   `{results:{id:{url,status,latency_ms,body}}, failed:[{worker_id,url,status,error,message}],
//!   total, succeeded}`, 200 when all succeed, else 207.

use std::sync::Arc;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Map, Value};

use super::body::{json, RouterBody};
use super::refit_routes::{ctx, read};
use super::state::AppState;
use crate::refit::selector::labels_of;
use crate::refit::state::eligible;
use crate::refit::{execute, LabelSelector};
use crate::workers::Worker;

/// SMG's `Worker` JSON (plus kvrouter's refit fields).
pub(crate) fn worker_json(w: &Worker, gate_closed: bool) -> Value {
    let info = &w.info;
    json!({
        "id": w.public_id,
        "url": w.url,
        "base_url": w.url,
        "engine": "sglang",
        "engine_version": info.version,
        "model_id": w.model_id().unwrap_or("unknown"),
        "worker_type": w.spec.worker_type(),
        "connection_mode": "http",
        "tp_size": info.tp_size,
        "dp_size": info.dp_size,
        "pp_size": info.pp_size,
        "dp_ranks": info.dp_size.max(1),
        "role": Value::Null,
        "health": if w.is_healthy() { "healthy" } else { "unhealthy" },
        "weight_version": w.weight_version(),
        "control_url": w.url,
        "labels": labels_of(w),
        "capabilities": {
            "pause_modes": ["wait", "abort", "retract", "in_place"],
            "update_from": ["disk", "tensor", "distributed"],
        },
        "gpu_count": info.gpu_count(),
        "paused": w.is_paused() || gate_closed,
        "awaiting_refit": w.is_awaiting_refit(),
        "in_flight": w.in_flight(),
        "incarnation": w.incarnation(),
    })
}

fn rl_error(status: StatusCode, code: &str, message: impl Into<String>) -> Response<RouterBody> {
    json(status, &json!({"error": code, "message": message.into()}))
}

/// `GET /v1/rl/workers`.
pub(crate) fn list(state: &AppState) -> Response<RouterBody> {
    let closed = state.refit.gate.is_closed();
    let workers: Vec<Value> = state
        .registry
        .snapshot()
        .iter()
        .map(|w| worker_json(w, closed))
        .collect();
    json(
        StatusCode::OK,
        &json!({"workers": workers, "total": workers.len()}),
    )
}

/// `GET /v1/rl/workers/{id}`.
pub(crate) fn get(state: &AppState, key: &str) -> Response<RouterBody> {
    match state.registry.lookup(key) {
        Some(w) => json(
            StatusCode::OK,
            &worker_json(&w, state.refit.gate.is_closed()),
        ),
        None => rl_error(
            StatusCode::NOT_FOUND,
            "worker_not_found",
            format!("no worker {key:?}"),
        ),
    }
}

/// Splits a query into `selector` and the rest (forwarded to the engine).
fn split_query(query: Option<&str>) -> (Option<String>, Option<String>) {
    let Some(q) = query else { return (None, None) };
    let mut selector = None;
    let mut rest = Vec::new();
    for (k, v) in url::form_urlencoded::parse(q.as_bytes()) {
        if k == "selector" {
            selector = Some(v.into_owned());
        } else {
            rest.push((k.into_owned(), v.into_owned()));
        }
    }
    let rest = (!rest.is_empty()).then(|| {
        url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(rest)
            .finish()
    });
    (selector, rest)
}

fn engine_path(path: &str, query: Option<String>) -> String {
    match query {
        Some(q) => format!("/{path}?{q}"),
        None => format!("/{path}"),
    }
}

/// `ANY /v1/rl/workers/{id}/engine/{path}`.
pub(crate) async fn call_one(
    state: &AppState,
    key: &str,
    path: &str,
    req: Request<Incoming>,
) -> Response<RouterBody> {
    let Some(worker) = state.registry.lookup(key) else {
        return rl_error(
            StatusCode::NOT_FOUND,
            "worker_not_found",
            format!("no worker {key:?}"),
        );
    };
    let (method, query, body) = match read(state, req).await {
        Ok(r) => r,
        Err(e) => return rl_error(e.status, e.code, e.message),
    };
    let path = engine_path(path, split_query(query.as_deref()).1);
    let exec = match execute::run(&ctx(state), method, &path, body, vec![worker], false).await {
        Ok(e) => e,
        Err(e) => return rl_error(StatusCode::BAD_REQUEST, "invalid_control_call", e.0),
    };
    let Some(o) = exec.outcomes.first() else {
        return rl_error(
            StatusCode::NOT_FOUND,
            "not_in_flight",
            exec.note.unwrap_or_default(),
        );
    };
    match o.status {
        Some(status) => json(
            status,
            &json!({"worker_id": o.worker.public_id, "url": o.worker.url, "status": status.as_u16(),
                    "latency_ms": o.latency_ms, "body": o.body_json()}),
        ),
        None => rl_error(
            StatusCode::BAD_GATEWAY,
            "upstream_unreachable",
            o.failure_message(),
        ),
    }
}

/// `ANY /v1/rl/engine/{path}?selector=...`.
pub(crate) async fn fanout(
    state: &AppState,
    path: &str,
    req: Request<Incoming>,
) -> Response<RouterBody> {
    let (method, query, body) = match read(state, req).await {
        Ok(r) => r,
        Err(e) => return rl_error(e.status, e.code, e.message),
    };
    let (selector, rest) = split_query(query.as_deref());
    let Some(selector) = selector else {
        return rl_error(
            StatusCode::BAD_REQUEST,
            "missing_selector",
            "the ?selector= query parameter is required (e.g. selector=engine=sglang)",
        );
    };
    let sel = match LabelSelector::parse(&selector) {
        Ok(s) => s,
        Err(e) => return rl_error(StatusCode::BAD_REQUEST, "invalid_selector", e),
    };
    let all = eligible(&state.registry);
    let targets: Vec<Arc<Worker>> = all
        .iter()
        .filter(|w| sel.matches(&labels_of(w)))
        .cloned()
        .collect();
    if targets.is_empty() {
        return rl_error(
            StatusCode::NOT_FOUND,
            "no_matching_workers",
            format!("no eligible worker matches selector {selector:?}"),
        );
    }
    let fleet_wide = targets.len() == all.len();
    let path = engine_path(path, rest);
    let exec = match execute::run(&ctx(state), method, &path, body, targets, fleet_wide).await {
        Ok(e) => e,
        Err(e) => return rl_error(StatusCode::BAD_REQUEST, "invalid_control_call", e.0),
    };
    let mut results = Map::new();
    let mut failed = Vec::new();
    for o in &exec.outcomes {
        if let Some(s) = o.status {
            results.insert(
                o.worker.public_id.clone(),
                json!({"url": o.worker.url, "status": s.as_u16(), "latency_ms": o.latency_ms, "body": o.body_json()}),
            );
        }
        if !o.succeeded() {
            failed.push(json!({
                "worker_id": o.worker.public_id, "url": o.worker.url,
                "status": o.status.map(|s| s.as_u16()),
                "error": if o.status.is_some() { "engine_error" } else { "upstream_unreachable" },
                "message": o.failure_message(),
            }));
        }
    }
    let status = if failed.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::MULTI_STATUS
    };
    let mut body = json!({"results": results, "failed": failed, "total": exec.outcomes.len(),
                          "succeeded": exec.succeeded()});
    if let Some(r) = &exec.report {
        body["rank_assignment"] = r.clone();
    }
    json(status, &body)
}
