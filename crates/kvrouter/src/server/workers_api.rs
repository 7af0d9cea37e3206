//! Worker-management routes, all three API generations of sgl-router:
//! 0.3 REST (`POST /workers` -> 202, `GET /workers`, `GET|DELETE /workers/{id}`),
//! 0.2 (`DELETE /workers/{urlencoded url}`) and legacy (`POST /add_worker?url=`,
//! `POST /remove_worker?url=`, `GET /list_workers`); and `GET /routers`, the router replicas
//! etcd discovery knows.

use http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;

use super::body::{json, text, RouterBody};
use super::data_plane::read_body;
use super::error::ApiError;
use super::state::AppState;
use crate::workers::{AddWorkerError, WorkerConfigRequest, WorkerSpec};

const ADMIN_BODY_LIMIT: usize = 1 << 20;

fn add_error(e: AddWorkerError) -> Response<RouterBody> {
    let status = StatusCode::from_u16(e.status_code()).unwrap_or(StatusCode::BAD_REQUEST);
    ApiError::new(status, e.code(), e.to_string()).into_response()
}

/// Decodes one percent-encoded path segment (`http%3A%2F%2Fh%3A1` -> `http://h:1`).
pub(crate) fn decode_segment(seg: &str) -> String {
    let guarded = seg.replace('+', "%2B");
    url::form_urlencoded::parse(format!("k={guarded}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| seg.to_string())
}

/// The `url` (or `worker_url`) query parameter.
fn query_url(req_query: Option<&str>) -> Option<String> {
    url::form_urlencoded::parse(req_query.unwrap_or("").as_bytes())
        .find(|(k, _)| k == "url" || k == "worker_url")
        .map(|(_, v)| v.into_owned())
}

/// `POST /workers {url, worker_type?, ...}` -> 202 `{status, worker_id, url, location, message}`.
pub(crate) async fn create(state: &AppState, req: Request<Incoming>) -> Response<RouterBody> {
    let (parts, body) = req.into_parts();
    let bytes = match read_body(
        &parts.headers,
        body,
        ADMIN_BODY_LIMIT,
        state.config.limits.body_read_timeout,
        &state.body_budget,
    )
    .await
    {
        Ok((b, _permit)) => b,
        Err(e) => return e.into_response(),
    };
    let request: WorkerConfigRequest = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        Err(e) => {
            return ApiError::bad_request(
                "invalid_worker_request",
                format!("expected {{\"url\": ..., \"worker_type\"?: ...}}: {e}"),
            )
            .into_response()
        }
    };
    if let Err(e) = crate::workers::Role::parse(request.spec.worker_type.as_deref()) {
        return ApiError::bad_request("invalid_worker_request", e).into_response();
    }
    match state.registry.start_add_worker(&request.url, request.spec) {
        Ok(accepted) => {
            let location = format!("/workers/{}", accepted.public_id);
            let mut resp = json(
                StatusCode::ACCEPTED,
                &json!({
                    "status": "accepted",
                    "worker_id": accepted.public_id,
                    "url": crate::workers::url::worker_url_key(&request.url),
                    "location": location,
                    "message": if accepted.existing {
                        "Worker already registered"
                    } else {
                        "Worker addition queued for background processing"
                    },
                }),
            );
            if let Ok(v) = HeaderValue::from_str(&location) {
                resp.headers_mut().insert(header::LOCATION, v);
            }
            resp
        }
        Err(e) => add_error(e),
    }
}

/// `GET /workers`.
pub(crate) fn list(state: &AppState) -> Response<RouterBody> {
    json(StatusCode::OK, &state.registry.workers_json())
}

/// `GET /workers/{id or urlencoded url}`.
pub(crate) fn get(state: &AppState, key: &str) -> Response<RouterBody> {
    let key = decode_segment(key);
    match state.registry.worker_json(&key) {
        Some(v) => json(StatusCode::OK, &v),
        None => not_found(&key),
    }
}

fn not_found(key: &str) -> Response<RouterBody> {
    ApiError::not_found("WORKER_NOT_FOUND", format!("no worker {key:?}")).into_response()
}

/// `DELETE /workers/{id or urlencoded url}` -> 202 (the worker drains in the background).
pub(crate) fn delete(state: &AppState, key: &str) -> Response<RouterBody> {
    let key = decode_segment(key);
    let removed = match state.registry.lookup(&key) {
        Some(w) => state.registry.start_remove_by_id(w.id),
        None => None,
    };
    match removed {
        Some(w) => json(
            StatusCode::ACCEPTED,
            &json!({"status":"accepted","worker_id": w.public_id, "url": w.url,
                    "message":"Worker removal queued (draining in-flight requests)"}),
        ),
        None if state.registry.cancel_pending(&key) => json(
            StatusCode::ACCEPTED,
            &json!({"status":"accepted","worker_id": key, "message":"Pending registration cancelled"}),
        ),
        None => not_found(&key),
    }
}

/// Legacy `POST /add_worker?url=` (also `worker_url`, or a JSON body `{"url"}`): waits for the
/// probe, then answers `200 "Successfully added worker: <url>"`.
pub(crate) async fn add_legacy(state: &AppState, req: Request<Incoming>) -> Response<RouterBody> {
    let (parts, body) = req.into_parts();
    let url = match query_url(parts.uri.query()) {
        Some(u) => u,
        None => {
            let bytes = read_body(
                &parts.headers,
                body,
                ADMIN_BODY_LIMIT,
                state.config.limits.body_read_timeout,
                &state.body_budget,
            )
            .await
            .map(|(b, _permit)| b)
            .unwrap_or_default();
            let from_body = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| {
                    v.get("url")
                        .or_else(|| v.get("worker_url"))
                        .and_then(|u| u.as_str().map(str::to_string))
                });
            match from_body {
                Some(u) => u,
                None => {
                    return ApiError::bad_request(
                        "missing_worker_url",
                        "expected ?url=<worker url> or a JSON body {\"url\": ...}",
                    )
                    .into_response()
                }
            }
        }
    };
    match state.registry.add_worker(&url, WorkerSpec::default()).await {
        Ok(_) => text(
            StatusCode::OK,
            format!(
                "Successfully added worker: {}",
                crate::workers::url::worker_url_key(&url)
            ),
        ),
        Err(e) => add_error(e),
    }
}

/// Legacy `POST /remove_worker?url=`: drains, removes, then answers 200.
pub(crate) async fn remove_legacy(
    state: &AppState,
    req: Request<Incoming>,
) -> Response<RouterBody> {
    let Some(url) = query_url(req.uri().query()) else {
        return ApiError::bad_request("missing_worker_url", "expected ?url=<worker url>")
            .into_response();
    };
    match state.registry.remove_by_url(&url).await {
        Some(_) => text(
            StatusCode::OK,
            format!("Successfully removed worker: {url}"),
        ),
        None => not_found(&url),
    }
}

/// Legacy `GET /list_workers` -> `{"urls":[...]}`.
pub(crate) fn list_legacy(state: &AppState) -> Response<RouterBody> {
    json(StatusCode::OK, &state.registry.list_workers_json())
}

/// `GET /routers`: the router replicas registered in etcd (404 without `--etcd-endpoints`,
/// 503 when etcd cannot be read).
pub(crate) async fn routers(state: &AppState) -> Response<RouterBody> {
    let Some(d) = state.discovery.get() else {
        return ApiError::not_found("not_found", "/routers needs --etcd-endpoints").into_response();
    };
    match d.routers_json().await {
        Ok(v) => json(StatusCode::OK, &v),
        Err(e) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "etcd_unavailable", e).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_url_segments() {
        assert_eq!(decode_segment("http%3A%2F%2Fh%3A1"), "http://h:1");
        assert_eq!(decode_segment("0b3c-uuid"), "0b3c-uuid");
        assert_eq!(decode_segment("a+b"), "a+b");
        assert_eq!(
            query_url(Some("x=1&url=http%3A%2F%2Fh%3A2")).unwrap(),
            "http://h:2"
        );
    }
}
