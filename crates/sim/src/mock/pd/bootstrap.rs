//! The prefill role's bootstrap listener on `--disaggregation-bootstrap-port` (SGLang runs
//! `CommonKVBootstrapServer` there, `disaggregation/common/conn.py`; routers never call it):
//!
//! - `GET /health`: 200 `OK`, as SGLang's bootstrap server answers.
//! - `POST /mock/pd/room/{room}` (mock-private, used by the decode mock): registers the decode
//!   for the room (`{"decode_prefix_len", "prefill_dp_rank", "rid"}`) and answers when the
//!   transfer is done: 200 `{"first_token", "logprob", "tokens"}`; 409 for a second receiver
//!   of a room; 500 `{"error"}` when the prefill fails or goes away. SGLang's own exchange
//!   (`PUT/GET /route`, then ZMQ and RDMA) is not reproduced. The registration is withdrawn
//!   when the decode closes the connection.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;

use super::rooms::{RoomError, Rooms};

/// Path prefix of the room rendezvous.
pub const ROOM_PATH: &str = "/mock/pd/room/";

/// A decode's registration body.
#[derive(Debug, Serialize, Deserialize)]
pub struct RegisterBody {
    #[serde(default)]
    pub decode_prefix_len: usize,
    #[serde(default)]
    pub prefill_dp_rank: Option<u32>,
    #[serde(default)]
    pub rid: String,
}

/// The answer once the KV is across.
#[derive(Debug, Serialize, Deserialize)]
pub struct RegisterReply {
    pub first_token: u32,
    pub logprob: f32,
    pub tokens: usize,
    #[serde(default)]
    pub cached_tokens: usize,
}

type Resp = Response<Full<Bytes>>;

fn reply(status: StatusCode, body: serde_json::Value) -> Resp {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

/// Accepts bootstrap connections until the listener fails; every connection is a tracked task.
pub async fn serve(listener: TcpListener, rooms: Arc<Rooms>, tasks: TaskTracker) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("bootstrap accept failed: {e}");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let rooms = rooms.clone();
        tasks.spawn(async move {
            let svc = service_fn(move |req| {
                let rooms = rooms.clone();
                async move { Ok::<_, Infallible>(handle(rooms, req).await) }
            });
            if let Err(e) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                tracing::debug!("bootstrap connection ended: {e}");
            }
        });
    }
}

async fn handle(rooms: Arc<Rooms>, req: Request<Incoming>) -> Resp {
    let path = req.uri().path().to_string();
    if path == "/health" && req.method() == Method::GET {
        let mut r = Response::new(Full::new(Bytes::from_static(b"OK")));
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        return r;
    }
    let Some(room) = path.strip_prefix(ROOM_PATH) else {
        return reply(StatusCode::NOT_FOUND, json!({"error": "Not Found"}));
    };
    if req.method() != Method::POST {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            json!({"error": "Method Not Allowed"}),
        );
    }
    let Ok(room) = room.parse::<u64>() else {
        return reply(
            StatusCode::BAD_REQUEST,
            json!({"error": format!("bad bootstrap room {room:?}")}),
        );
    };
    let body = match Limited::new(req.into_body(), 64 * 1024).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return reply(StatusCode::BAD_REQUEST, json!({"error": e.to_string()})),
    };
    let reg: RegisterBody = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return reply(StatusCode::BAD_REQUEST, json!({"error": e.to_string()})),
    };
    let mut wait = match rooms.register_decode(room, reg.decode_prefix_len, reg.prefill_dp_rank) {
        Ok(w) => w,
        Err(e @ (RoomError::DuplicateDecode | RoomError::DuplicatePrefill)) => {
            return reply(StatusCode::CONFLICT, json!({"error": e.to_string()}))
        }
    };
    // Dropped with the connection when the decode goes away: the guard withdraws it.
    match wait.outcome().await {
        Ok(t) => reply(
            StatusCode::OK,
            json!(RegisterReply {
                first_token: t.first_token,
                logprob: t.logprob,
                tokens: t.tokens,
                cached_tokens: t.cached_tokens,
            }),
        ),
        Err(m) => reply(StatusCode::INTERNAL_SERVER_ERROR, json!({"error": m})),
    }
}
