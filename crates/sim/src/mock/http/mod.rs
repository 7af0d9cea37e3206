//! The mock's HTTP/1.1 server (hyper) and route table, with SGLang's paths and shapes.

pub mod control;
pub mod generate;
pub mod hooks;
pub mod info;
pub mod meta;
pub mod namespace;
pub mod openai;
pub mod parse;
pub mod respond;
pub mod server_info;
pub mod v1_loads;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::{header, Method, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use tokio::net::TcpListener;

use respond::{json, native_error, openai_error, Resp};

use crate::mock::state::MockState;

const MAX_BODY: usize = 256 * 1024 * 1024;

/// Routes that exist (a wrong method on them is 405, as FastAPI answers).
const KNOWN_PATHS: &[&str] = &[
    "/generate",
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/models",
    "/health",
    "/health_generate",
    "/model_info",
    "/get_model_info",
    "/server_info",
    "/get_server_info",
    "/get_load",
    "/v1/loads",
    "/metrics",
    "/version",
    "/get_weight_version",
    "/flush_cache",
    "/abort_request",
    "/pause_generation",
    "/continue_generation",
    "/update_weights_from_disk",
    "/update_weights_from_distributed",
    "/update_weights_from_tensor",
    "/init_weights_update_group",
    "/destroy_weights_update_group",
    "/begin_weight_update",
    "/end_weight_update",
    "/update_weight_version",
    "/release_memory_occupation",
    "/resume_memory_occupation",
    "/mock/fail_next",
    "/mock/set_health",
    "/mock/state",
];

/// Accepts connections forever. Like SGLang's uvicorn, a keep-alive connection idle for
/// `--timeout-keep-alive` seconds is closed (hyper's header-read timer runs from the end of
/// the previous response, so it is both the idle and the request-head limit).
pub async fn serve(listener: TcpListener, state: Arc<MockState>) {
    let keep_alive = Duration::from_secs_f64(state.args.timeout_keep_alive);
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(handle(state, req).await) }
            });
            if let Err(e) = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(keep_alive)
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                tracing::debug!("connection ended: {e}");
            }
        });
    }
}

fn authorized(state: &MockState, req: &Request<Incoming>) -> bool {
    let Some(key) = &state.args.api_key else {
        return true;
    };
    req.headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|k| k == key)
}

async fn handle(state: Arc<MockState>, req: Request<Incoming>) -> Resp {
    if !authorized(&state, &req) {
        return json(StatusCode::UNAUTHORIZED, &json!({"error": "Unauthorized"}));
    }
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().map(str::to_string);
    let bytes = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return native_error(
                StatusCode::BAD_REQUEST,
                format!("cannot read request body: {e}"),
            )
        }
    };
    let post = method == Method::POST || method == Method::PUT;
    let get = method == Method::GET || method == Method::HEAD;
    let s = &state;
    match path.as_str() {
        "/generate" if post => generate::generate(s, &bytes).await,
        "/v1/chat/completions" if method == Method::POST => openai::chat(s, &bytes).await,
        "/v1/completions" if method == Method::POST => openai::completions(s, &bytes).await,
        "/v1/models" if get => openai::models(s),
        p if get && p.starts_with("/v1/models/") => openai::model(s, &p["/v1/models/".len()..]),
        "/health" | "/health_generate" if get => info::health(s),
        "/model_info" | "/get_model_info" if get => info::model_info(s),
        "/server_info" | "/get_server_info" if get => info::server_info(s),
        // SGLang 0.5.23 removed /get_load (only /v1/loads remains).
        "/get_load" if !s.args.legacy_info() => {
            json(StatusCode::NOT_FOUND, &json!({"detail": "Not Found"}))
        }
        "/get_load" if get => info::get_load(s),
        "/v1/loads" if get => v1_loads::v1_loads(s, query.as_deref()),
        "/metrics" if get => info::metrics(s),
        "/version" if get => info::version(s),
        "/get_weight_version" if get => info::weight_version(s),
        "/flush_cache" if get || post => control::flush_cache(s).await,
        "/abort_request" if post => control::abort_request(s, &bytes),
        "/pause_generation" if post => control::pause(s, &bytes).await,
        "/continue_generation" if post => control::resume(s).await,
        "/update_weights_from_disk"
        | "/update_weights_from_distributed"
        | "/update_weights_from_tensor"
            if post =>
        {
            control::update_weights(s, &path, &bytes).await
        }
        "/init_weights_update_group"
        | "/destroy_weights_update_group"
        | "/begin_weight_update"
        | "/end_weight_update"
            if post =>
        {
            control::weights_group(s, &path, &bytes)
        }
        "/update_weight_version" if post => control::update_weight_version(s, &bytes).await,
        "/release_memory_occupation" if get || post => control::memory(s, true, &bytes).await,
        "/resume_memory_occupation" if get || post => control::memory(s, false, &bytes).await,
        "/mock/fail_next" if post => hooks::fail_next(s, &bytes),
        "/mock/set_health" if post => hooks::set_health(s, &bytes),
        "/mock/state" if get => hooks::engine_state(s),
        p if KNOWN_PATHS.contains(&p) => json(
            StatusCode::METHOD_NOT_ALLOWED,
            &json!({"detail": "Method Not Allowed"}),
        ),
        p if p.starts_with("/v1/") => {
            openai_error(StatusCode::NOT_FOUND, format!("{method} {p} not found"))
        }
        _ => json(StatusCode::NOT_FOUND, &json!({"detail": "Not Found"})),
    }
}
