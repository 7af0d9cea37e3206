//! Helpers shared by the `router_*` integration tests: start routers and mocks, poll for a
//! state with a deadline, and an in-process stub worker (hyper) whose `/generate` behaviour
//! the test chooses (fixed bytes, a status, or never answering).
#![allow(dead_code)]

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use serde_json::Value;

#[path = "../support/mod.rs"]
pub mod support;

pub use support::{mock, router, Proc};

/// Flags that make health checks fast in tests.
pub const FAST_HEALTH: &[&str] = &[
    "--health-check-interval-secs",
    "0.2",
    "--health-check-timeout-secs",
    "1",
    "--health-failure-threshold",
    "1",
    "--health-success-threshold",
    "1",
    "--retry-initial-backoff-ms",
    "5",
    "--log-level",
    "warn",
];

/// Starts a router with `args` plus those `FAST_HEALTH` flags `args` does not set.
pub fn start_router(args: &[&str]) -> Proc {
    let mut all: Vec<&str> = FAST_HEALTH
        .chunks(2)
        .filter(|pair| !args.contains(&pair[0]))
        .flatten()
        .copied()
        .collect();
    all.extend_from_slice(args);
    router(&all)
}

/// Starts a router over `workers` and waits until all of them are routable.
pub async fn router_with(workers: &[&str], extra: &[&str]) -> Proc {
    let joined = workers.join(",");
    let mut args = vec!["--worker-urls", joined.as_str()];
    args.extend_from_slice(extra);
    let r = start_router(&args);
    wait_healthy_count(&r.url, workers.len()).await;
    r
}

/// A fast `sglang-mock` (`--speedup 0`).
pub fn fast_mock() -> Proc {
    mock(&["--speedup", "0"])
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client")
}

/// Polls `check` every 20 ms until it returns true or 30 s pass (then panics with `what`).
pub async fn wait_for<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

/// `GET {router}/workers` as JSON.
pub async fn workers(router: &str) -> Value {
    client()
        .get(format!("{router}/workers"))
        .send()
        .await
        .expect("GET /workers")
        .json()
        .await
        .expect("json")
}

/// Number of workers the router reports healthy.
pub async fn healthy_count(router: &str) -> usize {
    let v = workers(router).await;
    v["workers"]
        .as_array()
        .map(|ws| {
            ws.iter()
                .filter(|w| w["is_healthy"] == true && w["routable"] != false)
                .count()
        })
        .unwrap_or(0)
}

/// Waits until the router reports exactly `n` healthy workers.
pub async fn wait_healthy_count(router: &str, n: usize) {
    let r = router.to_string();
    wait_for(&format!("{n} healthy workers"), || {
        let r = r.clone();
        async move { healthy_count(&r).await == n }
    })
    .await;
}

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
        let behaviour = Arc::new(Mutex::new(behaviour));
        let (rx, bx) = (received.clone(), behaviour.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (rx, bx) = (rx.clone(), bx.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let (rx, bx) = (rx.clone(), bx.clone());
                        async move { Ok::<_, Infallible>(stub_answer(req, rx, bx).await) }
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

/// Asserts a router-made error body has the `{"error":{"message","type","code"}}` shape.
pub fn assert_error_shape(v: &Value, code: &str) {
    let e = &v["error"];
    assert!(e["message"].is_string(), "message in {v}");
    assert!(e["type"].is_string(), "type in {v}");
    assert_eq!(e["code"], code, "code in {v}");
}
