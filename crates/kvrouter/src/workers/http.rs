//! The tiny HTTP client the fleet code uses to talk to workers (probes, health
//! checks, load polls): GET with a deadline, status check, bounded body, JSON.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde_json::Value;

/// Pooled HTTP/1 client for GET requests to workers.
pub(crate) type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// Largest body read from a worker's info/health endpoints.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// Why a GET to a worker failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HttpGetError {
    #[error("invalid url {0}")]
    BadUrl(String),
    #[error("connection failed: {0}")]
    Connect(String),
    #[error("request failed: {0}")]
    Request(String),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("HTTP status {0}")]
    Status(u16),
    #[error("reading the body failed: {0}")]
    Body(String),
    #[error("body is not JSON: {0}")]
    Json(String),
}

impl HttpGetError {
    /// True when nothing is listening (or the host is unreachable): a hint that the
    /// worker process is gone, as opposed to alive but failing.
    pub(crate) fn is_connect(&self) -> bool {
        matches!(self, HttpGetError::Connect(_))
    }
}

/// How long a pooled connection to a worker may sit idle and still be reused (the default of
/// `--worker-idle-timeout-secs`): below SGLang's keep-alive (`SGLANG_TIMEOUT_KEEP_ALIVE`,
/// 5 s by default; `python/sglang/srt/environ.py`, passed to uvicorn as
/// `timeout_keep_alive`), so the router stops reusing a connection before the worker closes
/// it instead of racing the close.
pub(crate) const WORKER_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// Builds the client with a connect timeout and TCP_NODELAY; pooled connections are reused
/// while idle for less than `idle_timeout` (`--worker-idle-timeout-secs`).
pub(crate) fn new_client(connect_timeout: Duration, idle_timeout: Duration) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(connect_timeout));
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(idle_timeout)
        .build(connector)
}

/// The `Authorization` header value for a worker: `Bearer <api_key>` when it has an
/// api key, else `Basic` of the credentials of its URL, else none.
pub(crate) fn authorization(
    api_key: Option<&str>,
    credentials: Option<&super::url::Credentials>,
) -> Option<String> {
    match (api_key, credentials) {
        (Some(key), _) => Some(format!("Bearer {key}")),
        (None, Some(c)) => Some(c.basic_authorization()),
        (None, None) => None,
    }
}

/// GET `url`, returning the status and body (whatever the status), within `timeout`;
/// `authorization` is the full header value (see [`authorization`]).
pub(crate) async fn http_get(
    client: &HttpClient,
    url: &str,
    authorization: Option<&str>,
    timeout: Duration,
) -> Result<(u16, Bytes), HttpGetError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|_| HttpGetError::BadUrl(url.to_string()))?;
    let mut req = http::Request::get(uri);
    if let Some(mut value) = authorization.and_then(|v| http::HeaderValue::from_str(v).ok()) {
        value.set_sensitive(true);
        req = req.header(http::header::AUTHORIZATION, value);
    }
    let req = req
        .body(Empty::new())
        .map_err(|e| HttpGetError::BadUrl(format!("{url}: {e}")))?;
    let fut = async {
        let resp = client.request(req).await.map_err(|e| {
            if e.is_connect() {
                HttpGetError::Connect(error_chain(&e))
            } else {
                HttpGetError::Request(error_chain(&e))
            }
        })?;
        let status = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| HttpGetError::Body(e.to_string()))?
            .to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| HttpGetError::Timeout(timeout))?
}

/// GET `url` and parse a 2xx body as JSON.
pub(crate) async fn http_get_json(
    client: &HttpClient,
    url: &str,
    api_key: Option<&str>,
    timeout: Duration,
) -> Result<Value, HttpGetError> {
    let (status, body) = http_get(client, url, api_key, timeout).await?;
    if !(200..300).contains(&status) {
        return Err(HttpGetError::Status(status));
    }
    serde_json::from_slice(&body).map_err(|e| HttpGetError::Json(e.to_string()))
}

/// An error and its sources on one line (hyper's top-level messages are terse).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}
