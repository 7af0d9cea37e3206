//! Router-local endpoints: `/health`, `/readiness`, `/health_generate`, `/v1/models`,
//! `/get_server_info`, `/get_model_info` (first healthy worker) and `/metrics`.

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};
use serde_json::json;

use super::body::{full, json, text, with_type, RouterBody};
use super::error::ApiError;
use super::state::AppState;
use crate::proxy::fanout;
use crate::proxy::headers::WORKER_HEADER;

/// `GET /health`, `/liveness`: the router process is up.
pub(crate) fn health() -> Response<RouterBody> {
    text(StatusCode::OK, "OK")
}

/// `GET /readiness`: 200 once at least one worker is healthy (and the routing index is not
/// rebuilding, e.g. from JetStream), 503 before and from the start of a shutdown drain on
/// (SIGTERM/SIGINT).
pub(crate) fn readiness(state: &AppState) -> Response<RouterBody> {
    let snapshot = state.registry.snapshot();
    if state.shutdown.is_cancelled() {
        return json(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"status":"not ready","reason":"shutting down",
                    "total_workers":snapshot.len()}),
        );
    }
    let routable = state.registry.routable();
    let healthy = routable.len();
    if let Some(reason) = state
        .index
        .as_ref()
        .and_then(|i| i.not_ready(&state.registry))
    {
        return json(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"status":"not ready","reason":reason,
                    "healthy_workers":healthy,"total_workers":snapshot.len()}),
        );
    }
    let pd_gap = state
        .pd
        .as_ref()
        .and_then(|_| crate::pd::roles::readiness_gap(&routable));
    if let Some(reason) = pd_gap {
        return json(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"status":"not ready","reason":reason,
                    "healthy_workers":healthy,"total_workers":snapshot.len()}),
        );
    }
    if healthy > 0 {
        json(
            StatusCode::OK,
            &json!({"status":"ready","healthy_workers":healthy,"total_workers":snapshot.len()}),
        )
    } else {
        json(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"status":"not ready","reason":"insufficient healthy workers",
                    "healthy_workers":0,"total_workers":snapshot.len()}),
        )
    }
}

/// `GET /health_generate`: 200 if any worker is healthy (not proxied).
pub(crate) fn health_generate(state: &AppState) -> Response<RouterBody> {
    let routable = state.registry.routable();
    let pd_ready = state.pd.is_none() || crate::pd::roles::readiness_gap(&routable).is_none();
    if pd_ready && !routable.is_empty() {
        text(StatusCode::OK, "At least one worker is healthy")
    } else {
        ApiError::no_workers().into_response()
    }
}

/// `GET /v1/models`: the served models of the registered workers.
pub(crate) fn models(state: &AppState) -> Response<RouterBody> {
    let snapshot = state.registry.snapshot();
    let mut ids: Vec<String> = Vec::new();
    // PD mode: the prefill workers' models (sgl-router asks a prefill worker).
    let pd = state.pd.is_some();
    for w in snapshot
        .iter()
        .filter(|w| !pd || w.role == crate::workers::Role::Prefill)
    {
        let id = w
            .info
            .served_model_name
            .clone()
            .or_else(|| w.info.model_path.clone())
            .unwrap_or_else(|| "default".to_string());
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    if ids.is_empty() {
        return ApiError::no_workers().into_response();
    }
    let data: Vec<_> = ids
        .iter()
        .map(|id| json!({"id": id, "object": "model", "owned_by": "local"}))
        .collect();
    json(StatusCode::OK, &json!({"object":"list","data":data}))
}

/// `GET /get_server_info`, `/server_info`: the router's settings and every worker's view.
pub(crate) fn server_info(state: &AppState) -> Response<RouterBody> {
    let c = &state.config;
    let body = json!({
        "router": {
            "name": "kvrouter",
            "version": env!("CARGO_PKG_VERSION"),
            "mode": c.mode.to_string(),
            "policy": state.selector.policy_name(),
            "page_size": c.page_size,
            "uptime_secs": state.started.elapsed().as_secs_f64(),
            "sticky_keys": state.selector.sticky().len(),
        },
        "workers": state.registry.workers_json().get("workers").cloned().unwrap_or(json!([])),
    });
    json(StatusCode::OK, &body)
}

/// `GET /get_model_info`, `/model_info`: proxied to the first healthy worker.
pub(crate) async fn model_info(state: &AppState, path: &'static str) -> Response<RouterBody> {
    let routable = state.registry.routable();
    let first = match state.pd {
        Some(_) => crate::pd::roles::info_worker(&routable),
        None => routable.first(),
    };
    let Some(worker) = first else {
        return ApiError::no_workers().into_response();
    };
    match fanout::call(
        &state.client,
        Method::GET,
        worker.as_ref().into(),
        path,
        Bytes::new(),
        Duration::from_secs(10),
    )
    .await
    {
        Ok((status, headers, body)) => {
            let mut resp = Response::new(full(body));
            *resp.status_mut() = status;
            if let Some(ct) = headers.get(header::CONTENT_TYPE) {
                resp.headers_mut().insert(header::CONTENT_TYPE, ct.clone());
            }
            if let Ok(v) = HeaderValue::from_str(&worker.url) {
                resp.headers_mut().insert(WORKER_HEADER, v);
            }
            resp
        }
        Err(e) => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_request_failed",
            format!("{}{path}: {e}", worker.url),
        )
        .into_response(),
    }
}

/// `GET /metrics`: the router's own Prometheus metrics.
pub(crate) fn metrics() -> Response<RouterBody> {
    with_type(
        StatusCode::OK,
        crate::metrics::render(),
        "text/plain; version=0.0.4; charset=utf-8",
    )
}
