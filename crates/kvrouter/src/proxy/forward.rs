//! One attempt to send a request to one worker: original bytes out, response head back,
//! bounded by the time-to-first-byte deadline (never by the length of the body).

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;

use super::client::UpstreamClient;
use super::headers::request_headers;
use super::target::Target;

/// Why an attempt produced no response head.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// Nothing was sent to the worker (connect refused, connection reset before the
    /// request went out, ...): safe to retry elsewhere.
    #[error("cannot reach worker {url}: {message}")]
    Connect { url: String, message: String },
    /// The worker accepted the request but did not answer within the deadline.
    #[error("worker {url} did not answer within {after:?}")]
    Timeout { url: String, after: Duration },
    /// The connection failed after the request may have been sent.
    #[error("request to worker {url} failed: {message}")]
    Io { url: String, message: String },
    #[error("invalid worker URL {url}{path}")]
    BadUrl { url: String, path: String },
}

impl ForwardError {
    /// The `kind` label of `kvrouter_upstream_failures_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            ForwardError::Connect { .. } => "connect",
            ForwardError::Timeout { .. } => "timeout",
            ForwardError::Io { .. } => "io",
            ForwardError::BadUrl { .. } => "bad_url",
        }
    }
}

/// Sends `body` to `{target}{path}` with the client's headers (and the worker's credentials,
/// see [`Target::authorize`]), waiting at most `first_byte_timeout` for the response head.
pub async fn forward(
    client: &UpstreamClient,
    method: Method,
    target: Target<'_>,
    path: &str,
    headers: &HeaderMap,
    body: Bytes,
    first_byte_timeout: Duration,
) -> Result<Response<Incoming>, ForwardError> {
    let worker_url = target.url;
    let uri: Uri = format!("{worker_url}{path}")
        .parse()
        .map_err(|_| ForwardError::BadUrl {
            url: worker_url.to_string(),
            path: path.to_string(),
        })?;
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    request_headers(headers, req.headers_mut());
    target.authorize(req.headers_mut());
    match tokio::time::timeout(first_byte_timeout, client.request(req)).await {
        Err(_) => Err(ForwardError::Timeout {
            url: worker_url.to_string(),
            after: first_byte_timeout,
        }),
        Ok(Ok(resp)) => Ok(resp),
        Ok(Err(e)) if e.is_connect() => Err(ForwardError::Connect {
            url: worker_url.to_string(),
            message: error_chain(&e),
        }),
        Ok(Err(e)) => {
            // hyper reports a request that was never written (e.g. a pooled connection closed
            // by the peer) as "canceled"/"not sent": treat those like connect failures.
            let message = error_chain(&e);
            let unsent = is_unsent(&e);
            let url = worker_url.to_string();
            Err(if unsent {
                ForwardError::Connect { url, message }
            } else {
                ForwardError::Io { url, message }
            })
        }
    }
}

fn is_unsent(e: &hyper_util::client::legacy::Error) -> bool {
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(he) = s.downcast_ref::<hyper::Error>() {
            return he.is_canceled();
        }
        src = s.source();
    }
    false
}

/// `e: cause: cause` in one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}
