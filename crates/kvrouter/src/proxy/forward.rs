//! One attempt to send a request to one worker: original bytes out, response head back,
//! bounded by the time-to-first-byte deadline (never by the length of the body), and cut
//! short when the worker makes no progress while the health checker calls it unhealthy
//! ([`StallWatch`]). With an [`Orphan`], the request runs in its own task, so a response that
//! arrives after its client left can still be read to its end instead of closing the
//! connection (SGLang aborts a disconnected request by its rid as a prefix).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use parking_lot::Mutex;

use super::client::UpstreamClient;
use super::headers::request_headers;
use super::target::Target;
use crate::tasks::Tasks;

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
pub(crate) struct HeadWait<'a> {
    pub first_byte: Duration,
    pub stall: Option<StallWatch<'a>>,
    /// Run the request in a task whose late response is kept if the orphan says so.
    pub orphan: Option<&'a Orphan>,
}

/// Longest an orphaned or withheld response body is read after its client left.
const DRAIN_MAX: Duration = Duration::from_secs(1800);

/// What becomes of a response that arrives after [`forward`] stopped waiting (client gone):
/// dropped, closing the connection (the worker sees a disconnect), unless [`Orphan::keep`] was
/// called by then: its body is then read to the end, holding what `keep` was given.
#[derive(Clone)]
pub(crate) struct Orphan {
    hold: Arc<Mutex<Option<Box<dyn Send + Sync>>>>,
    /// Where the request's task and its body drain run.
    tasks: Tasks,
}

impl Orphan {
    /// Nothing kept yet; the request's task runs on `tasks`.
    pub(crate) fn new(tasks: &Tasks) -> Orphan {
        Orphan {
            hold: Arc::default(),
            tasks: tasks.clone(),
        }
    }

    /// Keeps the request running to its end if its response comes after all, holding `hold`
    /// (e.g. its rid entries) until then.
    pub(crate) fn keep(&self, hold: Box<dyn Send + Sync>) {
        *self.hold.lock() = Some(hold);
    }
}

/// Reads `body` to its end (or 30 min) in a task, holding `hold`, so the worker neither sees
/// a closed connection nor gets an abort (needs a tokio runtime; without one it is dropped).
pub(crate) fn drain_detached(tasks: &Tasks, body: Incoming, hold: Box<dyn Send + Sync>) {
    if tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    tasks.spawn("body drain", async move {
        let _hold = hold;
        let read = async {
            let mut body = body;
            while let Some(frame) = http_body_util::BodyExt::frame(&mut body).await {
                if frame.is_err() {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(DRAIN_MAX, read).await;
    });
}

/// When to give up on a worker that makes no progress: after `idle` without any, and then
/// at every recheck, if `unhealthy()` says so (a slow but healthy worker is waited for).
#[derive(Clone, Copy)]
pub(crate) struct StallWatch<'a> {
    pub idle: Duration,
    pub unhealthy: &'a (dyn Fn() -> bool + Sync),
}

impl StallWatch<'_> {
    /// How often the health is looked at again once `idle` has passed.
    pub(crate) fn recheck(&self) -> Duration {
        super::stall_clock::recheck_every(self.idle)
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
pub(crate) async fn forward(
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
    let orphan = wait.orphan.cloned();
    let request = async move {
        match orphan {
            None => client
                .request(req)
                .await
                .map_err(|e| answer_error(worker_url, &e)),
            Some(orphan) => in_task(client, req, orphan, worker_url).await,
        }
    };
    match within(request, wait.first_byte, wait.stall).await {
        Ok(answered) => answered,
        Err(Cut::Timeout) => Err(ForwardError::Timeout {
            url: worker_url.to_string(),
            after: wait.first_byte,
        }),
        Err(Cut::Stalled(after)) => Err(ForwardError::Stalled {
            url: worker_url.to_string(),
            after,
        }),
    }
}

/// Why waiting for a response head was cut short.
#[derive(Debug, PartialEq)]
enum Cut {
    /// No head within the first-byte deadline.
    Timeout,
    /// The watch found the worker unhealthy this long after the request left.
    Stalled(Duration),
}

/// `request` within `first_byte`, given up earlier when `watch` finds the worker unhealthy
/// (looked at once `idle` has passed, then at every recheck).
async fn within<T>(
    request: impl Future<Output = T>,
    first_byte: Duration,
    watch: Option<StallWatch<'_>>,
) -> Result<T, Cut> {
    let started = tokio::time::Instant::now();
    let mut checks = watch.map(|w| tokio::time::interval_at(started + w.idle, w.recheck()));
    let request = tokio::time::timeout(first_byte, request);
    tokio::pin!(request);
    loop {
        tokio::select! {
            answered = &mut request => return answered.map_err(|_| Cut::Timeout),
            () = next_check(checks.as_mut()) => {
                if watch.is_some_and(|w| (w.unhealthy)()) {
                    return Err(Cut::Stalled(started.elapsed()));
                }
            }
        }
    }
}

/// The request sent from its own task; a response nobody waits for any more is drained if the
/// orphan was kept, else dropped.
async fn in_task(
    client: &UpstreamClient,
    req: Request<Full<Bytes>>,
    orphan: Orphan,
    worker_url: &str,
) -> Result<Response<Incoming>, ForwardError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let pending = client.request(req);
    let url = worker_url.to_string();
    let tasks = orphan.tasks.clone();
    tasks.spawn("orphan request", async move {
        let answered = pending.await.map_err(|e| answer_error(&url, &e));
        if let Err(Ok(resp)) = tx.send(answered) {
            let kept = orphan.hold.lock().take();
            if let Some(hold) = kept {
                drain_detached(&orphan.tasks, resp.into_body(), hold);
            }
        }
    });
    rx.await.unwrap_or_else(|_| {
        Err(ForwardError::Io {
            url: worker_url.to_string(),
            message: "the request task ended without an answer".to_string(),
        })
    })
}

/// The error of a request that got no response head.
fn answer_error(worker_url: &str, e: &hyper_util::client::legacy::Error) -> ForwardError {
    let url = worker_url.to_string();
    let message = error_chain(e);
    if e.is_connect() {
        return ForwardError::Connect { url, message };
    }
    // hyper reports a request that was never written (e.g. a pooled connection closed by the
    // peer) as "canceled"/"not sent": treat those like connect failures.
    if is_unsent(e) {
        ForwardError::Connect { url, message }
    } else {
        ForwardError::Io { url, message }
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
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use tokio::time::{sleep, Instant};

    const IDLE: Duration = Duration::from_secs(10);

    /// An answer `after` from now.
    async fn answer_after(after: Duration) -> &'static str {
        sleep(after).await;
        "head"
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_healthy_worker_is_waited_for_until_the_deadline() {
        let healthy = || false;
        let watch = Some(StallWatch {
            idle: IDLE,
            unhealthy: &healthy,
        });
        let slow = answer_after(Duration::from_secs(100));
        assert_eq!(
            within(slow, Duration::from_secs(1800), watch).await,
            Ok("head")
        );
        let start = Instant::now();
        let never = std::future::pending::<()>();
        assert_eq!(
            within(never, Duration::from_secs(60), watch).await,
            Err(Cut::Timeout)
        );
        assert_eq!(start.elapsed(), Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn an_unhealthy_worker_is_given_up_at_the_first_look_after_it_turns() {
        let sick = Arc::new(AtomicBool::new(false));
        let unhealthy = {
            let sick = sick.clone();
            move || sick.load(Ordering::Relaxed)
        };
        let tasks = Tasks::new();
        tasks.spawn("turns unhealthy at 25.5 s", async move {
            sleep(Duration::from_millis(25_500)).await;
            sick.store(true, Ordering::Relaxed);
        });
        let watch = Some(StallWatch {
            idle: IDLE,
            unhealthy: &unhealthy,
        });
        let never = std::future::pending::<()>();
        let cut = within(never, Duration::from_secs(1800), watch).await;
        // Looks at 10 s, then every second: the first look after 25.5 s is at 26 s.
        assert_eq!(cut, Err(Cut::Stalled(Duration::from_secs(26))));
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_watch_only_the_deadline_cuts() {
        let start = Instant::now();
        let never = std::future::pending::<()>();
        assert_eq!(
            within(never, Duration::from_secs(5), None).await,
            Err(Cut::Timeout)
        );
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }
}
