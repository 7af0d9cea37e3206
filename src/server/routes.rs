//! The route table: `(method, path)` -> handler, and which API key guards it.

use std::time::Instant;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use super::body::RouterBody;
use super::error::ApiError;
use super::state::AppState;
use super::{auth, data_plane, fanout_routes, info, workers_api};
use crate::routing::Endpoint;

/// A matched route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route<'a> {
    Data(Endpoint),
    Health,
    Readiness,
    HealthGenerate,
    Models,
    ModelInfo(&'static str),
    ServerInfo,
    GetLoads,
    FlushCache,
    EngineMetrics,
    Metrics,
    WorkersCreate,
    WorkersList,
    WorkerGet(&'a str),
    WorkerDelete(&'a str),
    AddWorker,
    RemoveWorker,
    ListWorkers,
    DebugIndex,
    MethodNotAllowed,
    NotFound,
}

/// Which key a route requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No key (probes, metrics, read-only info).
    Open,
    /// `--api-key`.
    Data,
    /// `--admin-api-key` (falls back to `--api-key`).
    Admin,
}

/// Matches a request line.
pub fn match_route<'a>(method: &Method, path: &'a str) -> Route<'a> {
    let path = if path.len() > 1 {
        path.trim_end_matches('/')
    } else {
        path
    };
    let get = method == Method::GET;
    let post = method == Method::POST;
    let r = match path {
        "/generate" if post => Route::Data(Endpoint::Generate),
        "/v1/chat/completions" if post => Route::Data(Endpoint::ChatCompletions),
        "/v1/completions" if post => Route::Data(Endpoint::Completions),
        "/health" | "/liveness" if get => Route::Health,
        "/readiness" if get => Route::Readiness,
        "/health_generate" if get => Route::HealthGenerate,
        "/v1/models" if get => Route::Models,
        "/get_model_info" if get => Route::ModelInfo("/get_model_info"),
        "/model_info" if get => Route::ModelInfo("/model_info"),
        "/get_server_info" | "/server_info" if get => Route::ServerInfo,
        "/get_loads" if get => Route::GetLoads,
        "/flush_cache" if post || get => Route::FlushCache,
        "/engine_metrics" if get => Route::EngineMetrics,
        "/metrics" if get => Route::Metrics,
        "/workers" if post => Route::WorkersCreate,
        "/workers" if get => Route::WorkersList,
        "/add_worker" if post => Route::AddWorker,
        "/remove_worker" if post => Route::RemoveWorker,
        "/list_workers" if get => Route::ListWorkers,
        "/debug/index" if get => Route::DebugIndex,
        "/generate"
        | "/v1/chat/completions"
        | "/v1/completions"
        | "/health"
        | "/liveness"
        | "/readiness"
        | "/health_generate"
        | "/v1/models"
        | "/get_model_info"
        | "/model_info"
        | "/get_server_info"
        | "/server_info"
        | "/get_loads"
        | "/flush_cache"
        | "/engine_metrics"
        | "/metrics"
        | "/workers"
        | "/add_worker"
        | "/remove_worker"
        | "/list_workers"
        | "/debug/index" => Route::MethodNotAllowed,
        _ => match path.strip_prefix("/workers/") {
            Some(key) if !key.is_empty() && !key.contains('/') => {
                if get {
                    Route::WorkerGet(key)
                } else if method == Method::DELETE {
                    Route::WorkerDelete(key)
                } else {
                    Route::MethodNotAllowed
                }
            }
            _ => Route::NotFound,
        },
    };
    r
}

impl Route<'_> {
    /// The key guarding this route.
    pub fn access(&self) -> Access {
        match self {
            Route::Data(_) | Route::Models => Access::Data,
            Route::WorkersCreate
            | Route::WorkersList
            | Route::WorkerGet(_)
            | Route::WorkerDelete(_)
            | Route::AddWorker
            | Route::RemoveWorker
            | Route::ListWorkers
            | Route::DebugIndex
            | Route::FlushCache => Access::Admin,
            _ => Access::Open,
        }
    }
}

/// Dispatches one request.
pub async fn handle(state: &AppState, req: Request<Incoming>) -> Response<RouterBody> {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let route = match_route(&method, &path);
    let key = match route.access() {
        Access::Open => None,
        Access::Data => state.config.api_key.as_deref(),
        Access::Admin => state.config.effective_admin_key(),
    };
    if let Err(e) = auth::check(req.headers(), key) {
        return e.into_response();
    }
    match route {
        Route::Data(endpoint) => data_plane::handle(state, endpoint, req, started).await,
        Route::Health => info::health(),
        Route::Readiness => info::readiness(state),
        Route::HealthGenerate => info::health_generate(state),
        Route::Models => info::models(state),
        Route::ModelInfo(p) => info::model_info(state, p).await,
        Route::ServerInfo => info::server_info(state),
        Route::GetLoads => fanout_routes::get_loads(state).await,
        Route::FlushCache => fanout_routes::flush_cache(state).await,
        Route::EngineMetrics => fanout_routes::engine_metrics(state).await,
        Route::Metrics => info::metrics(),
        Route::WorkersCreate => workers_api::create(state, req).await,
        Route::WorkersList => workers_api::list(state),
        Route::WorkerGet(k) => workers_api::get(state, k),
        Route::WorkerDelete(k) => workers_api::delete(state, k),
        Route::AddWorker => workers_api::add_legacy(state, req).await,
        Route::RemoveWorker => workers_api::remove_legacy(state, req).await,
        Route::ListWorkers => workers_api::list_legacy(state),
        Route::DebugIndex => match &state.kv {
            Some(kv) => super::body::json(
                StatusCode::OK,
                &crate::routing::kv::debug::index_json(kv, &state.registry),
            ),
            None => {
                ApiError::not_found("not_found", "/debug/index needs --mode kv").into_response()
            }
        },
        Route::MethodNotAllowed => ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{method} is not allowed on {path}"),
        )
        .into_response(),
        Route::NotFound => {
            ApiError::not_found("not_found", format!("no route {method} {path}")).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        assert_eq!(
            match_route(&Method::POST, "/generate"),
            Route::Data(Endpoint::Generate)
        );
        assert_eq!(
            match_route(&Method::GET, "/generate"),
            Route::MethodNotAllowed
        );
        assert_eq!(
            match_route(&Method::GET, "/workers/abc"),
            Route::WorkerGet("abc")
        );
        assert_eq!(
            match_route(&Method::DELETE, "/workers/http%3A%2F%2Fh"),
            Route::WorkerDelete("http%3A%2F%2Fh")
        );
        assert_eq!(match_route(&Method::GET, "/nope"), Route::NotFound);
        assert_eq!(
            match_route(&Method::POST, "/workers").access(),
            Access::Admin
        );
        assert_eq!(match_route(&Method::GET, "/metrics").access(), Access::Open);
    }
}
