//! `--max-concurrent-requests` / `--queue-size`: the data-plane admission limit, built from
//! tower's layers. A request holds one of `max_concurrent_requests` slots from admission until
//! its response head (tower's `ConcurrencyLimit`, as sgl-router's concurrency middleware
//! returns its token when the handler returns); up to `queue_size` more wait in a tower
//! `Buffer`; beyond that `LoadShed` refuses at once and the client gets 429.

use std::convert::Infallible;
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use tokio::sync::Semaphore;
use tower::buffer::Buffer;
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
        let slots = limits.max_concurrent_requests?;
        let inner = tower::service_fn(move |req: Request<Incoming>| {
            let state = state.clone();
            async move { Ok::<_, BoxError>(super::routes::handle(&state, req).await) }
        });
        let limited = ConcurrencyLimit::with_semaphore(inner, Arc::new(Semaphore::new(slots)));
        let svc = if limits.queue_size == 0 {
            Svc::new(LoadShed::new(limited))
        } else {
            Svc::new(LoadShed::new(Buffer::new(limited, limits.queue_size)))
        };
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
