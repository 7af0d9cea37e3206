//! Issue 25 finding 6 against a real `router`: what client headers reach a worker and what
//! worker headers reach the client. An in-process worker records the request head of every
//! `/generate` and answers with a header its `Connection:` names. Before the fix the
//! `Connection:`-named headers passed both ways, `X-Forwarded-For` passed unchanged and every
//! client header (Cookie, Authorization, SGLang's `x-override-rid`) reached the worker. Also:
//! a mistyped `KVROUTER_*` variable is warned at start, with the closest known name.
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion
#![allow(clippy::disallowed_methods)] // fixtures spawn their own tasks; `Tasks` is the router's

use crate::support;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use serde_json::json;

/// A worker answering SGLang's info routes and `/generate`, recording `/generate` heads.
struct Recorder {
    url: String,
    heads: Arc<Mutex<Vec<HeaderMap>>>,
}

async fn start_recorder() -> Recorder {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let heads: Arc<Mutex<Vec<HeaderMap>>> = Arc::default();
    let h = heads.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let h = h.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let h = h.clone();
                    async move { Ok::<_, Infallible>(answer(req, h).await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Recorder { url, heads }
}

async fn answer(
    req: Request<Incoming>,
    heads: Arc<Mutex<Vec<HeaderMap>>>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let (parts, body) = req.into_parts();
    let _ = body.collect().await;
    let body = match path.as_str() {
        "/server_info" | "/get_server_info" => json!({"page_size": 16, "dp_size": 1}),
        "/model_info" | "/get_model_info" => json!({"model_path": "dummy", "is_generation": true}),
        "/generate" => {
            heads.lock().push(parts.headers);
            json!({"text": "ok", "meta_info": {"id": "x", "prompt_tokens": 1, "completion_tokens": 1, "finish_reason": {"type": "length", "length": 1}}})
        }
        _ => json!({}),
    };
    Response::builder()
        .header("content-type", "application/json")
        .header("connection", "x-worker-hop")
        .header("x-worker-hop", "secret")
        .header("x-worker-end", "kept")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

#[tokio::test]
async fn client_headers_follow_the_forwarding_policy_both_ways() {
    let worker = start_recorder().await;
    let r = support::procs::router_with(&[&worker.url], &[]).await;
    let resp = support::http::client()
        .post(format!("{}/generate", r.url))
        .header("cookie", "session=abc")
        .header("authorization", "Bearer client-token")
        .header("x-override-rid", "victim-1")
        .header("x-data-parallel-rank", "3")
        .header("connection", "x-client-hop")
        .header("x-client-hop", "1")
        .header("x-forwarded-for", "203.0.113.7")
        .header("x-request-id", "req-1")
        .header(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )
        .header("x-smg-routing-key", "k1")
        .json(&json!({"text": "hello", "sampling_params": {"max_new_tokens": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers().get("x-worker-hop").is_none(),
        "{:?}",
        resp.headers()
    );
    assert_eq!(resp.headers()["x-worker-end"], "kept");
    let head = worker.heads.lock().pop().expect("the worker saw /generate");
    for dropped in [
        "cookie",
        "authorization",
        "x-override-rid",
        "x-data-parallel-rank",
        "x-client-hop",
    ] {
        assert!(
            head.get(dropped).is_none(),
            "{dropped} reached the worker: {head:?}"
        );
    }
    for kept in [
        "x-request-id",
        "traceparent",
        "x-smg-routing-key",
        "content-type",
    ] {
        assert!(
            head.get(kept).is_some(),
            "{kept} missing at the worker: {head:?}"
        );
    }
    assert_eq!(
        head["x-forwarded-for"], "203.0.113.7, 127.0.0.1",
        "{head:?}"
    );
    assert_eq!(head["forwarded"], "for=127.0.0.1;proto=http", "{head:?}");
    assert_eq!(head["x-forwarded-proto"], "http", "{head:?}");
}

#[tokio::test]
async fn named_headers_are_forwarded_when_configured() {
    let worker = start_recorder().await;
    let r = support::procs::router_with(
        &[&worker.url],
        &["--forward-request-header", "authorization,x-tenant-*"],
    )
    .await;
    let resp = support::http::client()
        .post(format!("{}/generate", r.url))
        .header("authorization", "Bearer client-token")
        .header("x-tenant-id", "t1")
        .header("cookie", "session=abc")
        .json(&json!({"text": "hello", "sampling_params": {"max_new_tokens": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let head = worker.heads.lock().pop().expect("the worker saw /generate");
    assert_eq!(head["authorization"], "Bearer client-token");
    assert_eq!(head["x-tenant-id"], "t1");
    assert!(head.get("cookie").is_none());
}

#[test]
fn a_mistyped_variable_is_warned_at_start() {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_router"))
        .args(["--host", "127.0.0.1", "--port", "0"])
        .env("KVROUTER_HEALTH_CHECK_INTERVAL", "5")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The warning is logged before the router listens: wait for it or for 30 s of silence.
    let mut found = None;
    while let Ok(l) = rx.recv_timeout(std::time::Duration::from_secs(30)) {
        if l.contains("KVROUTER_HEALTH_CHECK_INTERVAL") && l.contains("not a kvrouter setting") {
            found = Some(l);
            break;
        }
        if l.contains("listening on") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let line = found.expect("a warning naming the unknown variable");
    assert!(
        line.contains("did you mean KVROUTER_HEALTH_CHECK_INTERVAL_SECS"),
        "{line}"
    );
}
