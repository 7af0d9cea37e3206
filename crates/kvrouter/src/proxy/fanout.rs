//! Small buffered calls to workers for admin fan-outs (`/get_loads`, `/flush_cache`,
//! `/engine_metrics`, `/get_model_info`).

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};

use super::client::UpstreamClient;
use super::forward::error_chain;
use super::target::Target;

/// Calls `{target}{path}` with the worker's credentials and returns the status and the whole
/// body (bounded by `timeout`).
pub(crate) async fn call(
    client: &UpstreamClient,
    method: Method,
    target: Target<'_>,
    path: &str,
    body: Bytes,
    timeout: Duration,
) -> Result<(StatusCode, http::HeaderMap, Bytes), String> {
    let worker_url = target.url;
    let mut builder = Request::builder()
        .method(method)
        .uri(format!("{worker_url}{path}"));
    if !body.is_empty() {
        builder = builder.header(http::header::CONTENT_TYPE, "application/json");
    }
    let mut req = builder
        .body(Full::new(body))
        .map_err(|e| format!("bad request to {worker_url}{path}: {e}"))?;
    target.authorize(req.headers_mut());
    let fut = async {
        let resp = client.request(req).await.map_err(|e| error_chain(&e))?;
        let (parts, body) = resp.into_parts();
        let bytes = body
            .collect()
            .await
            .map_err(|e| error_chain(&e))?
            .to_bytes();
        Ok((parts.status, parts.headers, bytes))
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(format!("timed out after {timeout:?}")),
    }
}
