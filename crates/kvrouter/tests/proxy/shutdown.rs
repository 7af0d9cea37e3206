//! Graceful shutdown of the `router` binary: on SIGTERM it closes its listener (new connections
//! are refused) and its idle keep-alive connections, lets a stream in flight finish within
//! `--shutdown-grace-period-secs`, aborts what is left at the workers when the grace period
//! runs out, stops every background task (event sources, health checks, the Prometheus
//! listener) and exits with status 0.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion
#![allow(clippy::disallowed_methods)] // fixtures spawn their own tasks; `Tasks` is the router's

use crate::support;

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use support::captured::Captured;
use support::http::{client, post_json};
use support::kv::{kv_mock, wait_sources, ADMIN};
use support::procs::*;
use support::stub::{Behaviour, Stub};
use support::wait::wait_for;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends SIGTERM to `proc`.
fn sigterm(proc: &Proc) {
    sigterm_pid(proc.pid());
}

/// Sends SIGTERM to process `pid`.
fn sigterm_pid(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -TERM failed");
}

/// Starts a streaming `/generate` of `tokens` tokens through `router` and returns the byte
/// stream once its first chunk arrived.
async fn stream_started(
    router: &str,
    tokens: u32,
) -> (
    Vec<u8>,
    impl futures::Stream<Item = reqwest::Result<bytes::Bytes>>,
) {
    let body = json!({"text":"drain me","stream":true,
                      "sampling_params":{"max_new_tokens":tokens,"ignore_eos":true}});
    let resp = post_json(&client(), &format!("{router}/generate"), &body).await;
    assert_eq!(resp.status(), 200);
    let mut stream = Box::pin(resp.bytes_stream());
    let first = stream.next().await.unwrap().unwrap();
    (first.to_vec(), stream)
}

/// A connection that answered one keep-alive request (`GET /health`) and is now idle.
async fn idle_keep_alive(url: &str) -> tokio::net::TcpStream {
    let addr = url.trim_start_matches("http://");
    let mut conn = support::http::connect(url).await;
    let req = format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: keep-alive\r\n\r\n");
    conn.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&got).ends_with("OK") {
        let n = conn.read(&mut buf).await.unwrap();
        assert!(n > 0, "connection closed before the /health answer");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200"));
    conn
}

/// True once a new TCP connection to `url` is refused (the listener is closed).
async fn refused(url: &str) -> bool {
    let addr = url.trim_start_matches("http://").to_string();
    tokio::net::TcpStream::connect(addr).await.is_err()
}

/// The number of requests the mock at `url` is running or holding.
async fn mock_busy(url: &str) -> u64 {
    let (running, waiting) = support::http::mock_load(url).await;
    running + waiting
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_a_stream_in_flight_then_exits_0() {
    // ~7 ms per token at --speedup 1: the stream outlives the signal by a few seconds.
    let worker = mock(&[]);
    let mut r = router_with(
        &[&worker.url],
        &[
            "--mode",
            "round-robin",
            "--shutdown-grace-period-secs",
            "30",
        ],
    )
    .await;
    let mut idle = idle_keep_alive(&r.url).await;
    let (mut all, mut stream) = stream_started(&r.url, 400).await;
    sigterm(&r);
    // An idle keep-alive connection is closed at once, not after the grace period.
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), idle.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the idle keep-alive connection stayed open");
    // Stop accepting: the listener closes while the stream is still running.
    wait_for("the router's listener to close", || refused(&r.url)).await;
    while let Some(chunk) = stream.next().await {
        all.extend_from_slice(&chunk.expect("the stream in flight is not cut"));
    }
    let text = String::from_utf8(all).unwrap();
    assert!(
        text.trim_end().ends_with("data: [DONE]"),
        "stream did not finish: ...{}",
        &text[text.len().saturating_sub(300)..]
    );
    let status = r
        .wait_exit(Duration::from_secs(20))
        .expect("router exits after the drain");
    assert_eq!(status.code(), Some(0), "exit status {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grace_period_over_aborts_at_the_worker_and_exits_0() {
    // ~75 ms per token at --speedup 0.1: 2000 tokens would take minutes.
    let tokens = 2000;
    let worker = mock(&["--speedup", "0.1"]);
    let mut r = router_with(
        &[&worker.url],
        &["--mode", "round-robin", "--shutdown-grace-period-secs", "1"],
    )
    .await;
    let (mut all, mut stream) = stream_started(&r.url, tokens).await;
    assert_eq!(mock_busy(&worker.url).await, 1);
    sigterm(&r);
    let status = r
        .wait_exit(Duration::from_secs(20))
        .expect("router exits once the grace period is over");
    assert_eq!(status.code(), Some(0), "exit status {status:?}");
    while let Some(Ok(chunk)) = stream.next().await {
        all.extend_from_slice(&chunk);
    }
    let text = String::from_utf8_lossy(&all);
    let chunks = text.matches("data: {").count();
    assert!(
        chunks < tokens as usize,
        "the stream was not cut ({chunks} chunks)"
    );
    wait_for("the worker to drop the aborted request", || async {
        mock_busy(&worker.url).await == 0
    })
    .await;
}

/// A request still waiting for its worker when the grace period ends is aborted with an
/// explicit worker-wide `/abort_request` (not only by the router's connection going away).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grace_period_over_sends_abort_all_to_every_worker() {
    let stub = Stub::start(Behaviour::Hang).await;
    let mut r = router_with(
        &[&stub.url],
        &["--mode", "round-robin", "--shutdown-grace-period-secs", "1"],
    )
    .await;
    let url = format!("{}/generate", r.url);
    let pending = tokio::spawn(async move {
        client()
            .post(url)
            .json(&json!({"text":"never answered"}))
            .send()
            .await
    });
    let received = stub.received.clone();
    wait_for("the request to reach the worker", || {
        let n = received.lock().len();
        async move { n == 1 }
    })
    .await;
    sigterm(&r);
    let status = r
        .wait_exit(Duration::from_secs(20))
        .expect("router exits once the grace period is over");
    assert_eq!(status.code(), Some(0), "exit status {status:?}");
    let aborts: Vec<Value> = stub
        .aborts
        .lock()
        .iter()
        .map(|b| serde_json::from_slice(b).unwrap())
        .collect();
    assert_eq!(aborts, vec![json!({"rid": "", "abort_all": true})]);
    assert!(
        pending.await.unwrap().is_err(),
        "the pending request is cut"
    );
}

/// After the drain every background task stops within the grace: the KV event sources, the
/// health checker, the sticky sweeper and the Prometheus listener (with an idle connection
/// to it, which never ends by itself); none is reported still running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_every_background_task_within_the_grace() {
    let worker = kv_mock(&[]);
    let prom = free_port().to_string();
    let mut r = Captured::start(&[
        "--mode",
        "kv",
        "--page-size",
        "4",
        "--admin-api-key",
        ADMIN,
        "--worker-urls",
        &worker.url,
        "--prometheus-port",
        &prom,
        "--shutdown-grace-period-secs",
        "3",
    ]);
    wait_sources(&client(), &r.url, 1).await;
    let metrics = client()
        .get(format!("http://127.0.0.1:{prom}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
    let mut idle = tokio::net::TcpStream::connect(format!("127.0.0.1:{prom}"))
        .await
        .unwrap();
    let signalled = std::time::Instant::now();
    sigterm_pid(r.pid());
    let status = r
        .wait_exit(Duration::from_secs(10))
        .expect("router exits within the grace");
    assert_eq!(status.code(), Some(0), "exit status {status:?}");
    assert!(
        signalled.elapsed() < Duration::from_secs(3),
        "nothing was in flight: the exit does not wait out the grace ({:?})",
        signalled.elapsed()
    );
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), idle.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the Prometheus connection stayed open");
    let lines = r.stderr_until("background tasks stopped").to_vec();
    assert!(
        lines.iter().any(|l| l.contains("background tasks stopped")),
        "no stop line in {lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("still running")),
        "a task outlived the grace: {lines:#?}"
    );
}
