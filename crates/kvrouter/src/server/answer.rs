//! The router's own answers on the data plane, which both the regular attempt path
//! (`attempt.rs`) and the PD dispatch (`pd_dispatch.rs`) give: refused at admission, refused
//! before any worker was tried, given up after a worker; and the wait at the refit gate that
//! precedes every attempt.

use http::{HeaderValue, Response, StatusCode};

use super::body::RouterBody;
use super::error::ApiError;
use super::state::AppState;
use crate::proxy::headers::WORKER_HEADER;
use crate::proxy::RequestTelemetry;

/// The router's own answer to a request refused at admission (before [`handle`]).
pub(crate) fn error(route: &'static str, e: ApiError) -> Response<RouterBody> {
    crate::proxy::telemetry::refused_at_admission(route, e.status);
    e.into_response()
}

/// The router's own answer before any worker was tried.
pub(crate) fn refuse(telemetry: RequestTelemetry, e: ApiError) -> Response<RouterBody> {
    telemetry.refused(e.status);
    e.into_response()
}

/// A router-made error after trying `worker`: still names the worker in `x-kvrouter-worker`.
pub(crate) fn worker_error(
    telemetry: RequestTelemetry,
    e: ApiError,
    worker: &str,
) -> Response<RouterBody> {
    telemetry.gave_up(e.status, worker);
    let mut resp = e.into_response();
    if let Ok(v) = HeaderValue::from_str(worker) {
        resp.headers_mut().insert(WORKER_HEADER, v);
    }
    resp
}

/// Waits at the refit gate (at once when open); 503 when refused, full or held too long.
pub(crate) async fn admit(state: &AppState) -> Result<(), ApiError> {
    state
        .refit
        .gate
        .admit(state.refit.config.max_hold)
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "generation_paused",
                e.to_string(),
            )
        })
}
