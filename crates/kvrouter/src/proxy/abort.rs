//! Best-effort `/abort_request` to a worker: per rid for requests whose client disconnected,
//! or abort-all at the end of a shutdown drain.

use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request};
use http_body_util::Full;

use super::client::UpstreamClient;
use super::rids::RidGuard;
use super::target::Target;
use crate::tasks::Tasks;
use crate::workers::Worker;

/// Aborts on `worker` the request's rids that cannot end another request there (SGLang matches
/// abort rids by prefix; see [`RidGuard::abortable`]). Nothing without rids. True when a rid
/// was withheld: the caller should then keep the worker connection rather than close it.
pub(crate) fn abort_isolated(
    tasks: &Tasks,
    client: &UpstreamClient,
    worker: &Worker,
    rids: Option<&RidGuard>,
) -> bool {
    let Some(guard) = rids else {
        return false;
    };
    let abort = guard.abortable(worker);
    if !abort.rids.is_empty() {
        abort_upstream(tasks, client, worker.into(), abort.rids);
    }
    abort.withheld
}

/// Spawns one `POST {worker}/abort_request {"rid": ...}` per rid (needs a tokio runtime;
/// silently does nothing outside one). Failures are logged at debug level only.
pub(crate) fn abort_upstream(
    tasks: &Tasks,
    client: &UpstreamClient,
    target: Target<'_>,
    rids: Vec<String>,
) {
    if tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    let client = client.clone();
    let target = target.to_owned();
    tasks.spawn("upstream abort", async move {
        let target = target.target();
        for rid in rids {
            let body = serde_json::json!({ "rid": rid });
            match post_abort(&client, target, &body).await {
                Ok(status) => tracing::debug!(url = %target.url, %rid, %status, "abort sent"),
                Err(e) => tracing::debug!(url = %target.url, %rid, error = %e, "abort failed"),
            }
        }
    });
}

/// One `POST {target}/abort_request` of an abort `body` with the worker's credentials, bounded
/// by 5 s: the worker's status, or why not.
pub(crate) async fn post_abort(
    client: &UpstreamClient,
    target: Target<'_>,
    body: &serde_json::Value,
) -> Result<http::StatusCode, String> {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(format!("{}/abort_request", target.url))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| e.to_string())?;
    target.authorize(req.headers_mut());
    match tokio::time::timeout(Duration::from_secs(5), client.request(req)).await {
        Ok(Ok(resp)) => Ok(resp.status()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out after 5 s".to_string()),
    }
}
