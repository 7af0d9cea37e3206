//! An in-process fake worker (hyper): SGLang info routes (page size 16) plus a
//! data-plane behaviour the test chooses (fixed bytes, a status, or never answering), and
//! `/abort_request` recorded in `Stub::aborts`. It also records which connections carried
//! data-plane requests (`Stub::data_connections`) and can close every open connection
//! without a `Connection: close` (`Stub::drop_connections`), like a worker whose keep-alive
//! timeout ran out.

use std::collections::{BTreeSet, HashSet};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
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
    conns: Arc<Conns>,
}

/// The stub's connections: which are open, which carried data-plane requests, and the
/// signal that closes them.
#[derive(Default)]
struct Conns {
    next: AtomicU64,
    open: Mutex<HashSet<u64>>,
    data: Mutex<BTreeSet<u64>>,
    kill: Arc<tokio::sync::Notify>,
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
        let conns = Arc::new(Conns::default());
        let (rx, ax, bx, cx) = (
            received.clone(),
            aborts.clone(),
            behaviour.clone(),
            conns.clone(),
        );
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (rx, ax, bx, cx) = (rx.clone(), ax.clone(), bx.clone(), cx.clone());
                let id = cx.next.fetch_add(1, Ordering::Relaxed);
                cx.open.lock().insert(id);
                // Made before the task starts, so a kill right after the accept reaches it.
                let killed = cx.kill.clone().notified_owned();
                tokio::spawn(async move {
                    let cx2 = cx.clone();
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let (rx, ax, bx, cx) = (rx.clone(), ax.clone(), bx.clone(), cx2.clone());
                        async move {
                            if is_data_plane(req.uri().path()) {
                                cx.data.lock().insert(id);
                            }
                            Ok::<_, Infallible>(stub_answer(req, rx, ax, bx).await)
                        }
                    });
                    let builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let conn = builder.serve_connection(TokioIo::new(stream), svc);
                    tokio::select! {
                        _ = conn => {}
                        () = killed => {}
                    }
                    cx.open.lock().remove(&id);
                });
            }
        });
        Stub {
            url,
            received,
            aborts,
            behaviour,
            task,
            conns,
        }
    }

    /// How many distinct connections have carried data-plane requests so far.
    pub fn data_connections(&self) -> usize {
        self.conns.data.lock().len()
    }

    /// Closes every open connection (no `Connection: close`, no response in flight is
    /// finished) and returns once they are closed.
    pub async fn drop_connections(&self) {
        let before: HashSet<u64> = self.conns.open.lock().clone();
        self.conns.kill.notify_waiters();
        super::wait::wait_for("the stub's connections to close", || {
            let closed = self.conns.open.lock().is_disjoint(&before);
            async move { closed }
        })
        .await;
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

fn is_data_plane(path: &str) -> bool {
    matches!(
        path,
        "/generate" | "/v1/chat/completions" | "/v1/completions"
    )
}

fn json_resp(status: u16, body: Value) -> Response<Full<Bytes>> {
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
        "/health" => json_resp(200, serde_json::json!({})),
        "/server_info" | "/get_server_info" => json_resp(
            200,
            serde_json::json!({"page_size": 16, "dp_size": 1, "served_model_name": "stub"}),
        ),
        "/model_info" | "/get_model_info" => json_resp(
            200,
            serde_json::json!({"model_path": "stub", "weight_version": "default"}),
        ),
        "/abort_request" => {
            aborts.lock().push(body);
            json_resp(200, serde_json::json!({}))
        }
        p if is_data_plane(p) => {
            received.lock().push(body);
            let b = behaviour.lock().clone();
            match b {
                Behaviour::Bytes(bytes) => Response::builder()
                    .status(StatusCode::OK)
                    .header("content-type", "application/json")
                    .header("x-stub-header", "kept")
                    .body(Full::new(bytes))
                    .expect("response"),
                Behaviour::Status(s) => json_resp(s, serde_json::json!({"detail": "stub status"})),
                Behaviour::Hang => {
                    std::future::pending::<()>().await;
                    unreachable!()
                }
            }
        }
        _ => json_resp(404, serde_json::json!({"detail": "not found"})),
    }
}
