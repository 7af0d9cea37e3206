//! `--max-concurrent-requests` / `--queue-size`: the data-plane admission limit, built from
//! tower's layers. A request holds one of `max_concurrent_requests` slots from admission until
//! its response head (tower's `ConcurrencyLimit`, as sgl-router's concurrency middleware
//! returns its token when the handler returns). An outer `ConcurrencyLimit` of
//! `max_concurrent_requests + queue_size` bounds running plus waiting requests; when it is
//! full, tower's `LoadShed` refuses at once and the client gets 429. (tower's `Buffer` would
//! hold one request more than its bound, so the queue is this second limit instead.)

use std::convert::Infallible;
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use tokio::sync::Semaphore;
use tower::limit::ConcurrencyLimit;
use tower::load_shed::error::Overloaded;
use tower::load_shed::LoadShed;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, ServiceExt};

use super::body::RouterBody;
use super::error::ApiError;
use super::state::AppState;
use crate::config::Limits;
use crate::proxy::metrics::ProxyMetrics;
use crate::routing::Endpoint;

type Svc = BoxCloneSyncService<Request<Incoming>, Response<RouterBody>, BoxError>;

/// The shared admission stack (clone per connection).
#[derive(Clone)]
pub struct Admission {
    svc: Svc,
}

impl Admission {
    /// The stack over [`super::routes::handle`], or `None` without `--max-concurrent-requests`.
    /// Needs a Tokio runtime (the queue's worker task is spawned here).
    pub fn new(limits: &Limits, state: Arc<AppState>) -> Option<Admission> {
        let slots = limits
            .max_concurrent_requests?
            .min(Semaphore::MAX_PERMITS / 2);
        let inner = tower::service_fn(move |req: Request<Incoming>| {
            let state = state.clone();
            async move { Ok::<_, BoxError>(super::routes::handle(&state, req).await) }
        });
        // Running: waits for one of `slots` inside the call (oneshot = ready, then call), so the
        // outer layer sees a service that is always ready.
        let running = ConcurrencyLimit::with_semaphore(inner, Arc::new(Semaphore::new(slots)));
        let waits = tower::service_fn(move |req: Request<Incoming>| running.clone().oneshot(req));
        let admitted = Arc::new(Semaphore::new(
            slots.saturating_add(limits.queue_size.min(Semaphore::MAX_PERMITS / 2)),
        ));
        let svc = Svc::new(LoadShed::new(ConcurrencyLimit::with_semaphore(
            waits, admitted,
        )));
        Some(Admission { svc })
    }

    /// Runs `req` (a data-plane request to `endpoint`) through the limit: the route's response,
    /// or 429 when every slot and queue place is taken.
    pub async fn handle(
        &self,
        endpoint: Endpoint,
        req: Request<Incoming>,
    ) -> Result<Response<RouterBody>, Infallible> {
        match self.svc.clone().oneshot(req).await {
            Ok(resp) => Ok(resp),
            Err(e) if e.is::<Overloaded>() => {
                ProxyMetrics::limit_tripped("max_concurrent_requests");
                Ok(super::data_plane::error(
                    endpoint.label(),
                    ApiError::new(
                        StatusCode::TOO_MANY_REQUESTS,
                        "too_many_requests",
                        "every --max-concurrent-requests slot and --queue-size place is taken",
                    ),
                ))
            }
            Err(e) => Ok(super::data_plane::error(
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
