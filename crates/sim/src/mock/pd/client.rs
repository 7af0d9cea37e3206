//! The decode role's side of the room rendezvous: one HTTP/1 request to the prefill's
//! bootstrap listener (`bootstrap.rs`) held open until the transfer is done, over a pool of
//! keep-alive connections per prefill (so a busy decode does not churn through ephemeral
//! ports). A refused or broken connection (the prefill process is gone) fails at once, the
//! way SGLang's decode learns it from its heartbeat to the prefill's bootstrap server
//! (`SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL` 5 s, `..._MAX_FAILURE` 2), only sooner.
//! Dropping a registration (the decode's client went away) closes its connection, which
//! withdraws it at the prefill. The pool's connection tasks run on the PD task tracker.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use tokio_util::task::TaskTracker;

use super::bootstrap::{RegisterBody, RegisterReply, ROOM_PATH};

/// Spawns the pool's connection tasks on the PD task tracker.
#[derive(Clone)]
struct Tracked(TaskTracker);

impl<F> hyper::rt::Executor<F> for Tracked
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        self.0.spawn(fut);
    }
}

/// The decode's client for prefill bootstrap listeners.
#[derive(Clone)]
pub struct BootstrapClient {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl std::fmt::Debug for BootstrapClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BootstrapClient")
    }
}

impl BootstrapClient {
    /// A pooled HTTP/1 client whose connection tasks are tracked by `tasks`.
    pub fn new(tasks: &TaskTracker) -> BootstrapClient {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(Tracked(tasks.clone()))
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        BootstrapClient { client }
    }

    /// Registers for `room` at the prefill's bootstrap listener and waits for the transfer.
    pub async fn register(
        &self,
        authority: &str,
        room: u64,
        body: &RegisterBody,
    ) -> Result<RegisterReply, String> {
        let payload = serde_json::to_vec(body).map_err(|e| e.to_string())?;
        let req = Request::post(format!("http://{authority}{ROOM_PATH}{room}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(payload)))
            .map_err(|e| e.to_string())?;
        let resp =
            self.client.request(req).await.map_err(|e| {
                format!("cannot reach the prefill bootstrap server {authority}: {e:?}")
            })?;
        let status = resp.status();
        let bytes = Limited::new(resp.into_body(), 64 * 1024)
            .collect()
            .await
            .map_err(|e| format!("bootstrap server {authority} went away: {e}"))?
            .to_bytes();
        if status != StatusCode::OK {
            let msg = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
                .unwrap_or_else(|| format!("bootstrap server answered {status}"));
            return Err(msg);
        }
        serde_json::from_slice::<RegisterReply>(&bytes)
            .map_err(|e| format!("bad bootstrap answer: {e}"))
    }
}

/// `host:port` for a connection (an IPv6 host is bracketed, as routers send it or not).
pub fn authority(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities() {
        assert_eq!(authority("10.0.0.1", 8998), "10.0.0.1:8998");
        assert_eq!(authority("::1", 8998), "[::1]:8998");
        assert_eq!(authority("[::1]", 8998), "[::1]:8998");
    }
}
