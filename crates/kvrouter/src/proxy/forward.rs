//! One attempt to send a request to one worker: original bytes out, response head back,
//! bounded by the time-to-first-byte deadline (never by the length of the body), and cut
//! short when the worker makes no progress while the health checker calls it unhealthy
//! ([`StallWatch`]).

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
    /// No response head for `after` while the worker is unhealthy (frozen, partitioned):
    /// the request was abandoned; nothing reached the client, so it may be retried elsewhere.
    #[error("worker {url} is unhealthy and sent nothing for {after:?}")]
    Stalled { url: String, after: Duration },
}

/// How long [`forward`] waits for the response head: at most `first_byte`, and less when
/// `stall` finds the worker stalled.
#[derive(Clone, Copy)]
pub struct HeadWait<'a> {
    pub first_byte: Duration,
    pub stall: Option<StallWatch<'a>>,
}

/// When to give up on a worker that makes no progress: after `idle` without any, and then
/// at every recheck, if `unhealthy()` says so (a slow but healthy worker is waited for).
#[derive(Clone, Copy)]
pub struct StallWatch<'a> {
    pub idle: Duration,
    pub unhealthy: &'a (dyn Fn() -> bool + Sync),
}

impl StallWatch<'_> {
    /// How often the health is looked at again once `idle` has passed.
    pub fn recheck(&self) -> Duration {
        self.idle.min(Duration::from_secs(1))
    }
}

impl ForwardError {
    /// The `kind` label of `kvrouter_upstream_failures_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            ForwardError::Connect { .. } => "connect",
            ForwardError::Timeout { .. } => "timeout",
            ForwardError::Io { .. } => "io",
            ForwardError::BadUrl { .. } => "bad_url",
            ForwardError::Stalled { .. } => "stalled",
        }
    }
}

/// Sends `body` to `{target}{path}` with the client's headers (and the worker's credentials,
/// see [`Target::authorize`]), waiting for the response head as `wait` says.
pub async fn forward(
    client: &UpstreamClient,
    method: Method,
    target: Target<'_>,
    path: &str,
    headers: &HeaderMap,
    body: Bytes,
    wait: HeadWait<'_>,
) -> Result<Response<Incoming>, ForwardError> {
    let worker_url = target.url;
    // One buffer handed to the URI as is (`Uri::try_from(String)` takes it without a copy).
    let mut full = String::with_capacity(worker_url.len() + path.len());
    full.push_str(worker_url);
    full.push_str(path);
    let uri = Uri::try_from(full).map_err(|_| ForwardError::BadUrl {
        url: worker_url.to_string(),
        path: path.to_string(),
    })?;
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    request_headers(headers, req.headers_mut());
    target.authorize(req.headers_mut());
    let (first_byte_timeout, watch) = (wait.first_byte, wait.stall);
    let started = tokio::time::Instant::now();
    let mut checks = watch.map(|w| tokio::time::interval_at(started + w.idle, w.recheck()));
    let request = tokio::time::timeout(first_byte_timeout, client.request(req));
    tokio::pin!(request);
    let answered = loop {
        tokio::select! {
            answered = &mut request => break answered,
            () = next_check(checks.as_mut()) => {
                if watch.is_some_and(|w| (w.unhealthy)()) {
                    return Err(ForwardError::Stalled {
                        url: worker_url.to_string(),
                        after: started.elapsed(),
                    });
                }
            }
        }
    };
    match answered {
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

/// The next health look of a watch; never, without one.
async fn next_check(checks: Option<&mut tokio::time::Interval>) {
    match checks {
        Some(c) => {
            c.tick().await;
        }
        None => std::future::pending().await,
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
