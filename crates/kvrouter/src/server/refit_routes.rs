//! Refit HTTP routes with SGLang's own paths and bodies: fan-outs to every eligible worker
//! (`POST /pause_generation`, `/flush_cache`, `/update_weights_from_*`, ...), one-worker
//! control calls (`/workers/{id}/<sglang path>`) and `GET /refit/state`.
//!
//! A fan-out answers 200 when every worker succeeded, else 502; both carry a per-worker
//! result list (worker id, url, status, body).

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};

use super::body::{json, RouterBody};
use super::data_plane::read_body;
use super::error::ApiError;
use super::state::AppState;
use crate::refit::state::{eligible, state_json};
use crate::refit::{execute, Ctx, Execution};

/// The refit context of `state`.
pub(crate) fn ctx(state: &AppState) -> Ctx<'_> {
    Ctx {
        refit: &state.refit,
        registry: &state.registry,
        client: &state.client,
    }
}

/// The request's method, path-and-query and body (bounded by `max_payload_size`).
pub(crate) async fn read(
    state: &AppState,
    req: Request<Incoming>,
) -> Result<(Method, Option<String>, Bytes), ApiError> {
    let (parts, body) = req.into_parts();
    let (bytes, _permit) = read_body(
        &parts.headers,
        body,
        state.config.limits.max_payload_size,
        state.config.limits.body_read_timeout,
        &state.body_budget,
    )
    .await?;
    Ok((parts.method, parts.uri.query().map(str::to_string), bytes))
}

/// One worker's entry in a result list.
pub(crate) fn outcome_json(o: &execute::FanoutOutcome) -> Value {
    json!({
        "worker_id": o.worker.public_id,
        "worker_key": o.worker.id.to_string(),
        "url": o.worker.url,
        "status": o.status.map(|s| s.as_u16()),
        "success": o.succeeded(),
        "body": o.body_json(),
        "error": o.error,
        "latency_ms": o.latency_ms,
    })
}

/// The native fan-out answer (200 all ok / 502 otherwise).
fn render(exec: &Execution) -> Response<RouterBody> {
    let ok = exec.all_ok();
    let failed: Vec<Value> = exec
        .outcomes
        .iter()
        .filter(|o| !o.succeeded())
        .map(|o| {
            json!({"worker_id": o.worker.public_id, "url": o.worker.url,
                   "status": o.status.map(|s| s.as_u16()), "error": o.failure_message()})
        })
        .collect();
    let message = match (&exec.note, ok) {
        (Some(n), _) => n.clone(),
        (None, true) => format!(
            "{} succeeded on all {} workers",
            exec.path,
            exec.outcomes.len()
        ),
        (None, false) => format!(
            "{} failed on {} of {} workers: {}",
            exec.path,
            failed.len(),
            exec.outcomes.len(),
            failed
                .iter()
                .filter_map(|f| f["url"].as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut body = json!({
        "success": ok,
        "path": exec.path,
        "message": message,
        "total": exec.outcomes.len(),
        "succeeded": exec.succeeded(),
        // sgl-router's /flush_cache shape: [[url, error], ...]
        "failed": exec.outcomes.iter().filter(|o| !o.succeeded())
            .map(|o| json!([o.worker.url, o.failure_message()])).collect::<Vec<_>>(),
        "failed_workers": failed,
        "results": exec.outcomes.iter().map(outcome_json).collect::<Vec<_>>(),
        "successful": exec.outcomes.iter().filter(|o| o.succeeded()).map(|o| o.worker.url.clone()).collect::<Vec<_>>(),
        "total_workers": exec.outcomes.len(),
    });
    if let Some(r) = &exec.report {
        body["rank_assignment"] = r.clone();
    }
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::BAD_GATEWAY
    };
    json(status, &body)
}

/// `POST /<sglang control path>` on the router: every eligible worker.
pub(crate) async fn fanout(
    state: &AppState,
    path: &str,
    req: Request<Incoming>,
) -> Response<RouterBody> {
    let (method, _query, body) = match read(state, req).await {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let targets = eligible(&state.registry);
    // A continue with no worker left must still reopen the gate.
    if targets.is_empty() && path != "/continue_generation" {
        return ApiError::no_workers().into_response();
    }
    let method = if method == Method::GET {
        Method::POST
    } else {
        method
    };
    match execute::run(&ctx(state), method, path, body, targets, true).await {
        Ok(exec) => render(&exec),
        Err(e) => ApiError::bad_request("invalid_control_call", e.0).into_response(),
    }
}

/// `ANY /workers/{id}/<sglang path>`: exactly one worker (any control or info call, e.g.
/// `update_weights_from_tensor`), answered with the worker's own status and body.
pub(crate) async fn one_worker(
    state: &AppState,
    key: &str,
    rest: &str,
    req: Request<Incoming>,
) -> Response<RouterBody> {
    let Some(worker) = state.registry.lookup(key) else {
        return ApiError::not_found("worker_not_found", format!("no worker {key:?}"))
            .into_response();
    };
    let (method, query, body) = match read(state, req).await {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let path = match query {
        Some(q) => format!("/{rest}?{q}"),
        None => format!("/{rest}"),
    };
    match execute::run(&ctx(state), method, &path, body, vec![worker], false).await {
        Ok(exec) => match exec.outcomes.first() {
            Some(o) if o.status.is_some() => {
                let status = o.status.unwrap_or(StatusCode::BAD_GATEWAY);
                let content_type = if serde_json::from_slice::<Value>(&o.body).is_ok() {
                    "application/json"
                } else {
                    "text/plain; charset=utf-8"
                };
                let mut resp = super::body::with_type(status, o.body.clone(), content_type);
                if let Ok(v) = http::HeaderValue::from_str(&o.worker.url) {
                    resp.headers_mut()
                        .insert(crate::proxy::headers::WORKER_HEADER, v);
                }
                resp
            }
            Some(o) => ApiError::new(
                StatusCode::BAD_GATEWAY,
                "upstream_unavailable",
                format!("{}: {}", o.worker.url, o.failure_message()),
            )
            .into_response(),
            None => render(&exec),
        },
        Err(e) => ApiError::bad_request("invalid_control_call", e.0).into_response(),
    }
}

/// `GET /refit/state`.
pub(crate) fn refit_state(state: &AppState) -> Response<RouterBody> {
    json(StatusCode::OK, &state_json(&state.refit, &state.registry))
}
