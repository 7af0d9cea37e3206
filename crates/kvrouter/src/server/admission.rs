//! `--max-concurrent-requests` / `--queue-size`: the data-plane admission limit, built from
//! tower's layers. A request holds one of `max_concurrent_requests` slots from admission until
//! its response head (tower's `ConcurrencyLimit`, as sgl-router's concurrency middleware
//! returns its token when the handler returns). An outer `ConcurrencyLimit` of
//! `max_concurrent_requests + queue_size` bounds running plus waiting requests; when it is
//! full, tower's `LoadShed` refuses at once and the client gets 429. (tower's `Buffer` would
//! hold one request more than its bound, so the queue is this second limit instead.) A
//! request that waits longer than `--queue-timeout-secs` for its slot gets 408, as in
//! sgl-router.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use tokio::sync::Semaphore;
use tower::limit::ConcurrencyLimit;
use tower::load_shed::error::Overloaded;
use tower::load_shed::LoadShed;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Service, ServiceExt};

use super::body::RouterBody;
use super::error::ApiError;
use super::state::AppState;
use crate::config::Limits;
use crate::proxy::metrics::ProxyMetrics;
use crate::routing::Endpoint;

type Svc = BoxCloneSyncService<Request<Incoming>, Response<RouterBody>, BoxError>;

/// `inner` behind the two limits: `slots` running, `queue` more waiting (beyond: `Overloaded`),
/// each waiter for at most `queue_timeout` (then [`QueueTimeout`]).
fn limited<R, S>(
    inner: S,
    slots: usize,
    queue: usize,
    queue_timeout: Duration,
) -> BoxCloneSyncService<R, S::Response, BoxError>
where
    R: Send + 'static,
    S: Service<R, Error = BoxError> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    let slots = slots.min(Semaphore::MAX_PERMITS / 2);
    // Running: waits (at most `queue_timeout`) for one of `slots` inside the call (ready, then
    // call), so the outer layer sees a service that is always ready.
    let running = ConcurrencyLimit::with_semaphore(inner, Arc::new(Semaphore::new(slots)));
    let waits = tower::service_fn(move |req: R| {
        let mut svc = running.clone();
        async move {
            let ready = tokio::time::timeout(queue_timeout, svc.ready())
                .await
                .map(|r| r.map(|_| ()));
            match ready {
                Ok(Ok(())) => svc.call(req).await,
                Ok(Err(e)) => Err(e),
                Err(_) => Err(Box::new(QueueTimeout(queue_timeout)) as BoxError),
            }
        }
    });
    let admitted = Arc::new(Semaphore::new(
        slots.saturating_add(queue.min(Semaphore::MAX_PERMITS / 2)),
    ));
    BoxCloneSyncService::new(LoadShed::new(ConcurrencyLimit::with_semaphore(
        waits, admitted,
    )))
}

/// A queued request found no slot within the queue timeout.
#[derive(Debug, thiserror::Error)]
#[error("no --max-concurrent-requests slot within --queue-timeout-secs ({0:?})")]
struct QueueTimeout(Duration);

/// The shared admission stack (clone per connection).
#[derive(Clone)]
pub(super) struct Admission {
    svc: Svc,
}

impl Admission {
    /// The stack over [`super::routes::handle`], or `None` without `--max-concurrent-requests`.
    /// Needs a Tokio runtime (the queue's worker task is spawned here).
    pub(super) fn new(limits: &Limits, state: Arc<AppState>) -> Option<Admission> {
        let slots = limits.max_concurrent_requests?;
        let inner = tower::service_fn(move |req: Request<Incoming>| {
            let state = state.clone();
            async move { Ok::<_, BoxError>(super::routes::handle(&state, req).await) }
        });
        let svc = limited(inner, slots, limits.queue_size, limits.queue_timeout);
        Some(Admission { svc })
    }

    /// Runs `req` (a data-plane request to `endpoint`) through the limit: the route's response,
    /// 429 when every slot and queue place is taken, 408 when no slot came in time.
    pub(super) async fn handle(
        &self,
        endpoint: Endpoint,
        req: Request<Incoming>,
    ) -> Result<Response<RouterBody>, Infallible> {
        match self.svc.clone().oneshot(req).await {
            Ok(resp) => Ok(resp),
            Err(e) if e.is::<Overloaded>() => {
                ProxyMetrics::limit_tripped("max_concurrent_requests");
                Ok(super::answer::error(
                    endpoint.label(),
                    ApiError::new(
                        StatusCode::TOO_MANY_REQUESTS,
                        "too_many_requests",
                        "every --max-concurrent-requests slot and --queue-size place is taken",
                    ),
                ))
            }
            Err(e) if e.is::<QueueTimeout>() => {
                ProxyMetrics::limit_tripped("queue_timeout");
                Ok(super::answer::error(
                    endpoint.label(),
                    ApiError::new(StatusCode::REQUEST_TIMEOUT, "queue_timeout", e.to_string()),
                ))
            }
            Err(e) => Ok(super::answer::error(
                endpoint.label(),
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "admission_failed",
                    format!("admission failed: {e}"),
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    type Call = oneshot::Receiver<()>;

    /// A service that answers when the request's sender fires (or is dropped).
    fn held() -> impl Service<Call, Response = (), Error = BoxError, Future = impl Send> + Clone {
        tower::service_fn(|rx: Call| async move {
            let _ = rx.await;
            Ok::<(), BoxError>(())
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_gets_the_freed_slot_or_times_out_and_a_full_queue_refuses_at_once() {
        let timeout = Duration::from_secs(30);
        let svc = limited(held(), 1, 1, timeout);
        let tasks = crate::tasks::Tasks::new();
        // One running, held until `release` fires.
        let (release, rx) = oneshot::channel();
        let running = tasks.spawn_with("running", |_| svc.clone().oneshot(rx));
        tokio::task::yield_now().await;
        // One waiting: gets the slot when the first ends, 10 s later.
        let (_keep, rx2) = oneshot::channel::<()>();
        let start = tokio::time::Instant::now();
        let waiting = tasks.spawn_with("waiting", |_| svc.clone().oneshot(rx2));
        tokio::task::yield_now().await;
        // The queue (1) is full: refused without waiting.
        let (_k3, rx3) = oneshot::channel::<()>();
        let refused = svc
            .clone()
            .oneshot(rx3)
            .await
            .err()
            .map(|e| e.is::<Overloaded>());
        assert_eq!(refused, Some(true));
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(release.send(()).is_ok());
        assert!(running.await.map(|r| r.is_ok()).unwrap_or(false));
        // The waiter now holds the slot (its sender is kept): a new waiter times out at 30 s.
        let (_k4, rx4) = oneshot::channel::<()>();
        let before = tokio::time::Instant::now();
        let timed_out = svc
            .clone()
            .oneshot(rx4)
            .await
            .err()
            .map(|e| e.is::<QueueTimeout>());
        assert_eq!(timed_out, Some(true));
        assert_eq!(before.elapsed(), timeout);
        assert!(
            !waiting.is_finished(),
            "the admitted waiter is still running"
        );
        assert!(start.elapsed() >= Duration::from_secs(40));
    }
}
