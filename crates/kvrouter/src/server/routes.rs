//! The route table: `(method, path)` -> handler, and which API key guards it.

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use tokio::time::Instant;

use super::body::RouterBody;
use super::error::ApiError;
use super::state::AppState;
use super::{auth, data_plane, fanout_routes, info, refit_routes, rl_api, workers_api};
use crate::refit::FANOUT_PATHS;
use crate::routing::Endpoint;

/// A matched route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route<'a> {
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
    /// `GET /routers`: router replicas registered in etcd.
    Routers,
    /// `GET /debug/index` (KV mode): per-unit block counts and digests.
    DebugIndex,
    /// `POST /<sglang control path>` fanned out to every eligible worker (refit plane).
    RefitFanout(&'static str),
    /// `ANY /workers/{id}/<sglang path>`: one worker.
    WorkerControl(&'a str, &'a str),
    RefitState,
    RlWorkers,
    RlWorker(&'a str),
    /// `ANY /v1/rl/workers/{id}/engine/{path}`.
    RlWorkerEngine(&'a str, &'a str),
    /// `ANY /v1/rl/engine/{path}?selector=`.
    RlEngine(&'a str),
    MethodNotAllowed,
    NotFound,
}

/// Which key a route requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// No key (probes, `/metrics`, model info).
    Open,
    /// `--api-key`.
    Data,
    /// Information that fans out to every worker or names them (`/get_loads`,
    /// `/engine_metrics`, `/get_server_info`): the admin key when one is set, else open.
    Info,
    /// `--admin-api-key` (falls back to `--api-key`); with neither, refused (403) on a
    /// non-loopback bind unless `--insecure-admin` ([`crate::config::Config::admin_locked`]).
    Admin,
}

/// Matches a request line.
pub(crate) fn match_route<'a>(method: &Method, path: &'a str) -> Route<'a> {
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
        "/routers" if get => Route::Routers,
        "/debug/index" if get => Route::DebugIndex,
        "/refit/state" if get => Route::RefitState,
        "/v1/rl/workers" if get => Route::RlWorkers,
        p if post && FANOUT_PATHS.contains(&p) => match FANOUT_PATHS.iter().find(|f| **f == p) {
            Some(f) => Route::RefitFanout(f),
            None => Route::NotFound,
        },
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
        | "/routers"
        | "/refit/state"
        | "/v1/rl/workers"
        | "/debug/index" => Route::MethodNotAllowed,
        p if FANOUT_PATHS.contains(&p) => Route::MethodNotAllowed,
        _ => prefixed_route(method, path),
    };
    r
}

/// Routes under `/workers/{id}/...` and `/v1/rl/...`.
fn prefixed_route<'a>(method: &Method, path: &'a str) -> Route<'a> {
    if let Some(rest) = path.strip_prefix("/v1/rl/workers/") {
        return match rest.split_once('/') {
            None if !rest.is_empty() && method == Method::GET => Route::RlWorker(rest),
            None if !rest.is_empty() => Route::MethodNotAllowed,
            Some((key, tail)) if !key.is_empty() => match tail.strip_prefix("engine/") {
                Some(p) if !p.is_empty() => Route::RlWorkerEngine(key, p),
                _ => Route::NotFound,
            },
            _ => Route::NotFound,
        };
    }
    if let Some(p) = path.strip_prefix("/v1/rl/engine/") {
        return if p.is_empty() {
            Route::NotFound
        } else {
            Route::RlEngine(p)
        };
    }
    match path.strip_prefix("/workers/") {
        Some(key) if !key.is_empty() && !key.contains('/') => {
            if method == Method::GET {
                Route::WorkerGet(key)
            } else if method == Method::DELETE {
                Route::WorkerDelete(key)
            } else {
                Route::MethodNotAllowed
            }
        }
        Some(rest) => match rest.split_once('/') {
            Some((key, tail)) if !key.is_empty() && !tail.is_empty() => {
                Route::WorkerControl(key, tail)
            }
            _ => Route::NotFound,
        },
        None => Route::NotFound,
    }
}

impl Route<'_> {
    /// The key guarding this route.
    pub(crate) fn access(&self) -> Access {
        match self {
            Route::Data(_) | Route::Models => Access::Data,
            Route::WorkersCreate
            | Route::WorkersList
            | Route::WorkerGet(_)
            | Route::WorkerDelete(_)
            | Route::AddWorker
            | Route::RemoveWorker
            | Route::ListWorkers
            | Route::Routers
            | Route::FlushCache
            | Route::DebugIndex
            | Route::RefitFanout(_)
            | Route::WorkerControl(..)
            | Route::RefitState
            | Route::RlWorkers
            | Route::RlWorker(_)
            | Route::RlWorkerEngine(..)
            | Route::RlEngine(_) => Access::Admin,
            Route::ServerInfo | Route::GetLoads | Route::EngineMetrics => Access::Info,
            _ => Access::Open,
        }
    }
}

/// Dispatches one request.
pub(crate) async fn handle(state: &AppState, req: Request<Incoming>) -> Response<RouterBody> {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let route = match_route(&method, &path);
    let key = match route.access() {
        Access::Open => None,
        Access::Data => state.config.server.api_key.as_deref(),
        Access::Info => state.config.effective_admin_key(),
        Access::Admin => {
            if let Err(e) = auth::admin_lock(&state.config) {
                return e.into_response();
            }
            state.config.effective_admin_key()
        }
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
        Route::FlushCache => refit_routes::fanout(state, "/flush_cache", req).await,
        Route::RefitFanout(p) => refit_routes::fanout(state, p, req).await,
        Route::WorkerControl(k, rest) => refit_routes::one_worker(state, k, rest, req).await,
        Route::RefitState => refit_routes::refit_state(state),
        Route::RlWorkers => rl_api::list(state),
        Route::RlWorker(k) => rl_api::get(state, k),
        Route::RlWorkerEngine(k, p) => rl_api::call_one(state, k, p, req).await,
        Route::RlEngine(p) => rl_api::fanout(state, p, req).await,
        Route::EngineMetrics => fanout_routes::engine_metrics(state).await,
        Route::Metrics => info::metrics(),
        Route::WorkersCreate => workers_api::create(state, req).await,
        Route::WorkersList => workers_api::list(state),
        Route::WorkerGet(k) => workers_api::get(state, k),
        Route::WorkerDelete(k) => workers_api::delete(state, k),
        Route::AddWorker => workers_api::add_legacy(state, req).await,
        Route::RemoveWorker => workers_api::remove_legacy(state, req).await,
        Route::ListWorkers => workers_api::list_legacy(state),
        Route::Routers => workers_api::routers(state).await,
        Route::DebugIndex => match &state.index {
            Some(index) => super::body::json(StatusCode::OK, &index.index_json(&state.registry)),
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
        assert_eq!(match_route(&Method::GET, "/routers"), Route::Routers);
        assert_eq!(
            match_route(&Method::GET, "/routers").access(),
            Access::Admin
        );
        assert_eq!(
            match_route(&Method::POST, "/workers").access(),
            Access::Admin
        );
        assert_eq!(match_route(&Method::GET, "/metrics").access(), Access::Open);
        assert_eq!(match_route(&Method::GET, "/health").access(), Access::Open);
        for p in [
            "/get_loads",
            "/engine_metrics",
            "/get_server_info",
            "/server_info",
        ] {
            assert_eq!(match_route(&Method::GET, p).access(), Access::Info, "{p}");
        }
        assert_eq!(
            match_route(&Method::POST, "/pause_generation"),
            Route::RefitFanout("/pause_generation")
        );
        assert_eq!(
            match_route(&Method::GET, "/pause_generation"),
            Route::MethodNotAllowed
        );
        assert_eq!(
            match_route(&Method::POST, "/workers/w1/update_weights_from_tensor"),
            Route::WorkerControl("w1", "update_weights_from_tensor")
        );
        assert_eq!(
            match_route(&Method::POST, "/v1/rl/workers/abc/engine/flush_cache"),
            Route::RlWorkerEngine("abc", "flush_cache")
        );
        assert_eq!(
            match_route(&Method::GET, "/v1/rl/workers/abc"),
            Route::RlWorker("abc")
        );
        assert_eq!(
            match_route(&Method::POST, "/v1/rl/engine/pause_generation"),
            Route::RlEngine("pause_generation")
        );
        assert_eq!(
            match_route(&Method::GET, "/refit/state").access(),
            Access::Admin
        );
    }
}
