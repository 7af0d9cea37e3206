//! Best-effort `/abort_request` to a worker for requests whose client disconnected.

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
            let body = serde_json::json!({ "rid": rid }).to_string();
            let Ok(req) = Request::builder()
                .method(Method::POST)
                .uri(&url)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(body)))
            else {
                return;
            };
            match tokio::time::timeout(Duration::from_secs(5), client.request(req)).await {
                Ok(Ok(resp)) => tracing::debug!(%url, %rid, status = %resp.status(), "abort sent"),
                Ok(Err(e)) => tracing::debug!(%url, %rid, error = %e, "abort failed"),
                Err(_) => tracing::debug!(%url, %rid, "abort timed out"),
            }
        }
    });
}
