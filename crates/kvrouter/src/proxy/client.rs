//! The pooled upstream HTTP client (hyper-util legacy client, keep-alive, no TLS).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

/// Client used for every call to a worker (data plane and fan-outs).
pub(crate) type UpstreamClient = Client<HttpConnector, Full<Bytes>>;

/// How the router calls its workers (`Config::upstream`).
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamSettings {
    /// Deadline for the worker's first response byte (not for the whole stream).
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    /// Pooled worker connections idle longer than this are not reused (below the workers'
    /// keep-alive).
    pub idle_timeout: Duration,
}

impl UpstreamSettings {
    /// The shared pooled client of these settings ([`build_client`]).
    pub(crate) fn client(&self) -> UpstreamClient {
        build_client(self.connect_timeout, self.idle_timeout)
    }
}

/// Builds the shared client: TCP_NODELAY, `connect_timeout`, pooled keep-alive connections
/// reused while idle for less than `idle_timeout` (`--worker-idle-timeout-secs`).
pub(crate) fn build_client(connect_timeout: Duration, idle_timeout: Duration) -> UpstreamClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(connect_timeout));
    connector.set_keepalive(Some(Duration::from_secs(30)));
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(idle_timeout)
        .pool_max_idle_per_host(512)
        .build(connector)
}
