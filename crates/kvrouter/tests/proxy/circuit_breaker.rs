//! The per-worker circuit breaker behind sgl-router's `--cb-*` flags: a worker that fails
//! `--cb-failure-threshold` attempts in a row is opened (no traffic, `circuit_state` in
//! `/workers`, `kvrouter_worker_circuit_state` 1), turns half-open after
//! `--cb-timeout-duration-secs`, and closes after `--cb-success-threshold` successes;
//! `--disable-circuit-breaker` keeps every circuit closed. (The timer itself is tested on
//! tokio's paused clock in `workers/breaker.rs`.)
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use serde_json::{json, Value};
use support::admin::workers;
use support::http::{client, post_json};
use support::procs::*;
use support::stub::*;
use support::wait::wait_for;

fn small() -> Value {
    json!({"text":"hello","sampling_params":{"max_new_tokens":2}})
}

async fn circuit(router: &str, worker: &str) -> String {
    let v = workers(router).await;
    let w = v["workers"]
        .as_array()
        .and_then(|ws| ws.iter().find(|w| w["url"] == worker).cloned())
        .unwrap_or_else(|| panic!("{worker} in {v}"));
    w["circuit_state"].as_str().unwrap_or("missing").to_string()
}

async fn gauge(router: &str, worker: &str) -> Option<String> {
    let text = support::http::get_text(&client(), &format!("{router}/metrics")).await;
    let key = format!("kvrouter_worker_circuit_state{{worker=\"{worker}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key).map(|v| v.trim().to_string()))
}

/// Sends `n` requests; returns the workers that answered.
async fn send(router: &str, n: usize) -> Vec<String> {
    let c = client();
    let mut by = Vec::new();
    for _ in 0..n {
        let resp = post_json(&c, &format!("{router}/generate"), &small()).await;
        assert_eq!(resp.status(), 200);
        by.push(
            resp.headers()["x-kvrouter-worker"]
                .to_str()
                .unwrap()
                .to_string(),
        );
    }
    by
}

/// Round-robin over a failing stub and a good mock; health never marks the stub down.
fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "--mode",
        "round-robin",
        "--health-failure-threshold",
        "1000",
        "--cb-failure-threshold",
        "2",
        "--cb-success-threshold",
        "2",
    ];
    a.extend_from_slice(extra);
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consecutive_failures_open_the_circuit_and_an_open_worker_gets_no_traffic() {
    let stub = Stub::start(Behaviour::Status(500)).await;
    let m = fast_mock();
    let r = router_with(
        &[&stub.url, &m.url],
        &args(&["--cb-timeout-duration-secs", "600"]),
    )
    .await;
    assert_eq!(circuit(&r.url, &stub.url).await, "closed");
    assert_eq!(gauge(&r.url, &stub.url).await.as_deref(), Some("0"));
    // Every request succeeds (retried on the mock) until the stub has failed twice.
    let stub_url = stub.url.clone();
    let ru = r.url.clone();
    wait_for("the stub's circuit opens", || {
        let (ru, su) = (ru.clone(), stub_url.clone());
        async move {
            send(&ru, 1).await;
            circuit(&ru, &su).await == "open"
        }
    })
    .await;
    assert_eq!(stub.received.lock().len(), 2, "opened after 2 failures");
    assert_eq!(gauge(&r.url, &stub.url).await.as_deref(), Some("1"));
    let before = stub.received.lock().len();
    let by = send(&r.url, 6).await;
    assert!(by.iter().all(|w| *w == m.url), "{by:?}");
    assert_eq!(stub.received.lock().len(), before, "no traffic while open");
    let text = support::http::get_text(&client(), &format!("{}/metrics", r.url)).await;
    assert!(
        text.contains(&format!(
            "kvrouter_worker_circuit_transitions_total{{from=\"closed\",to=\"open\",worker=\"{}\"}} 1",
            stub.url
        )),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_timeout_a_half_open_worker_closes_after_successes() {
    let stub = Stub::start(Behaviour::Status(500)).await;
    let m = fast_mock();
    let r = router_with(
        &[&stub.url, &m.url],
        &args(&["--cb-timeout-duration-secs", "0.3"]),
    )
    .await;
    let (ru, su) = (r.url.clone(), stub.url.clone());
    wait_for("the stub's circuit opens", || {
        let (ru, su) = (ru.clone(), su.clone());
        async move {
            send(&ru, 1).await;
            circuit(&ru, &su).await != "closed"
        }
    })
    .await;
    // The stub recovers; once the timeout has passed its circuit is half-open.
    stub.set(Behaviour::Bytes(bytes::Bytes::from_static(
        br#"{"text":"ok","meta_info":{}}"#,
    )));
    wait_for("half-open", || {
        let (ru, su) = (ru.clone(), su.clone());
        async move { circuit(&ru, &su).await == "half_open" }
    })
    .await;
    assert_eq!(gauge(&r.url, &stub.url).await.as_deref(), Some("2"));
    // Trials reach it; two successes close it.
    wait_for("closed again", || {
        let (ru, su) = (ru.clone(), su.clone());
        async move {
            send(&ru, 1).await;
            circuit(&ru, &su).await == "closed"
        }
    })
    .await;
    assert_eq!(gauge(&r.url, &stub.url).await.as_deref(), Some("0"));
    let by = send(&r.url, 4).await;
    assert!(
        by.contains(&stub.url),
        "the closed worker serves again: {by:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_circuit_breaker_keeps_it_closed() {
    let stub = Stub::start(Behaviour::Status(500)).await;
    let m = fast_mock();
    let r = router_with(&[&stub.url, &m.url], &args(&["--disable-circuit-breaker"])).await;
    send(&r.url, 8).await;
    assert!(
        stub.received.lock().len() >= 3,
        "the stub keeps being tried"
    );
    assert_eq!(circuit(&r.url, &stub.url).await, "closed");
}
