//! An in-process fake worker (hyper): SGLang info routes (page size 16) plus a
//! data-plane behaviour the test chooses (fixed bytes, a status, or never answering), and
//! `/abort_request` recorded in `Stub::aborts`.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use serde_json::Value;

/// What a stub worker's data-plane routes do.
#[derive(Clone)]
pub enum Behaviour {
    /// Answer 200 with these exact bytes (and `content-type: application/json`).
    Bytes(Bytes),
    /// Answer this status with a small JSON body.
    Status(u16),
    /// Never answer.
    Hang,
}

/// An in-process fake worker: SGLang info routes (page size 16) plus a chosen `/generate`.
pub struct Stub {
    pub url: String,
    /// Bodies received on data-plane routes, in order, byte for byte.
    pub received: Arc<Mutex<Vec<Bytes>>>,
    /// Bodies received on `/abort_request` (answered 200), in order.
    pub aborts: Arc<Mutex<Vec<Bytes>>>,
    behaviour: Arc<Mutex<Behaviour>>,
    task: tokio::task::JoinHandle<()>,
}

impl Stub {
    pub async fn start(behaviour: Behaviour) -> Stub {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind stub");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let received = Arc::new(Mutex::new(Vec::new()));
        let aborts = Arc::new(Mutex::new(Vec::new()));
        let behaviour = Arc::new(Mutex::new(behaviour));
        let (rx, ax, bx) = (received.clone(), aborts.clone(), behaviour.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (rx, ax, bx) = (rx.clone(), ax.clone(), bx.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let (rx, ax, bx) = (rx.clone(), ax.clone(), bx.clone());
                        async move { Ok::<_, Infallible>(stub_answer(req, rx, ax, bx).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Stub {
            url,
            received,
            aborts,
            behaviour,
            task,
        }
    }

    pub fn set(&self, b: Behaviour) {
        *self.behaviour.lock() = b;
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A response with `status` and the JSON `body` (the fake workers' answers).
pub fn json_resp(status: u16, body: &Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("response")
}

async fn stub_answer(
    req: Request<Incoming>,
    received: Arc<Mutex<Vec<Bytes>>>,
    aborts: Arc<Mutex<Vec<Bytes>>>,
    behaviour: Arc<Mutex<Behaviour>>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    match path.as_str() {
        "/health" => json_resp(200, &serde_json::json!({})),
        "/server_info" | "/get_server_info" => json_resp(
            200,
            &serde_json::json!({"page_size": 16, "dp_size": 1, "served_model_name": "stub"}),
        ),
        "/model_info" | "/get_model_info" => json_resp(
            200,
            &serde_json::json!({"model_path": "stub", "weight_version": "default"}),
        ),
        "/abort_request" => {
            aborts.lock().push(body);
            json_resp(200, &serde_json::json!({}))
        }
        "/generate" | "/v1/chat/completions" | "/v1/completions" => {
            received.lock().push(body);
            let b = behaviour.lock().clone();
            match b {
                Behaviour::Bytes(bytes) => Response::builder()
                    .status(StatusCode::OK)
                    .header("content-type", "application/json")
                    .header("x-stub-header", "kept")
                    .body(Full::new(bytes))
                    .expect("response"),
                Behaviour::Status(s) => json_resp(s, &serde_json::json!({"detail": "stub status"})),
                Behaviour::Hang => {
                    std::future::pending::<()>().await;
                    unreachable!()
                }
            }
        }
        _ => json_resp(404, &serde_json::json!({"detail": "not found"})),
    }
}
