//! Best-effort `/abort_request` to a worker: per rid for requests whose client disconnected,
//! or abort-all at the end of a shutdown drain.

use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request};
use http_body_util::Full;

use super::client::UpstreamClient;

/// Spawns one `POST {worker}/abort_request {"rid": ...}` per rid (needs a tokio runtime;
/// silently does nothing outside one). Failures are logged at debug level only.
pub fn abort_upstream(client: &UpstreamClient, worker_url: &str, rids: Vec<String>) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let client = client.clone();
    let url = format!("{worker_url}/abort_request");
    handle.spawn(async move {
        for rid in rids {
            let body = serde_json::json!({ "rid": rid });
            match post_abort(&client, &url, &body).await {
                Ok(status) => tracing::debug!(%url, %rid, %status, "abort sent"),
                Err(e) => tracing::debug!(%url, %rid, error = %e, "abort failed"),
            }
        }
    });
}

/// One `POST {url}` of an abort `body`, bounded by 5 s: the worker's status, or why not.
pub async fn post_abort(
    client: &UpstreamClient,
    url: &str,
    body: &serde_json::Value,
) -> Result<http::StatusCode, String> {
    let req = Request::builder()
        .method(Method::POST)
        .uri(url)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(Duration::from_secs(5), client.request(req)).await {
        Ok(Ok(resp)) => Ok(resp.status()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out after 5 s".to_string()),
    }
}
