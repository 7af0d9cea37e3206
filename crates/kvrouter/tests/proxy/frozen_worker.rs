//! A frozen worker (SIGSTOP: its socket still accepts, nothing answers): once the health
//! checker marks it unhealthy, requests already sent to it stop waiting after
//! `--stream-idle-timeout-secs` without progress instead of the 1,800 s request timeout. Before
//! the first byte they are retried on another worker; a stream already under way ends with
//! the SSE error event.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion
#![allow(clippy::disallowed_methods)] // fixtures spawn their own tasks; `Tasks` is the router's

use crate::support;

use futures::StreamExt;
use serde_json::json;
use support::http::{client, metrics, post_json};
use support::procs::*;

/// Sends `signal` (`STOP`, `CONT`) to `pid` with kill(1).
fn signal(pid: u32, signal: &str) {
    let ok = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{signal} {pid}");
}

/// Health checks slow enough that requests sent right after the freeze still reach the frozen
/// worker, and a first-byte timeout far beyond the test client's 60 s.
const FLAGS: &[&str] = &[
    "--mode",
    "round-robin",
    "--health-check-timeout-secs",
    "3",
    "--stream-idle-timeout-secs",
    "1",
    "--request-timeout-secs",
    "1800",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_waiting_on_a_frozen_worker_are_retried_elsewhere() {
    let (a, frozen) = (fast_mock(), fast_mock());
    let r = router_with(&[&a.url, &frozen.url], FLAGS).await;
    signal(frozen.pid(), "STOP");
    // Round-robin: of two requests sent now, one goes to the frozen worker.
    let send = || {
        let url = format!("{}/generate", r.url);
        tokio::spawn(async move {
            client()
                .post(url)
                .json(&json!({"text": "hello", "sampling_params": {"max_new_tokens": 2}}))
                .send()
                .await
        })
    };
    let (one, two) = (send(), send());
    for resp in [one.await.unwrap().unwrap(), two.await.unwrap().unwrap()] {
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["x-kvrouter-worker"], a.url.as_str());
    }
    let m = metrics(&r.url).await;
    signal(frozen.pid(), "CONT");
    assert!(
        m.contains("kvrouter_retries_total{reason=\"stalled\",route=\"generate\"} 1"),
        "{m}"
    );
    assert!(m.contains("kvrouter_limit_trips_total{limit=\"stream_idle_timeout\"} 1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_from_a_frozen_worker_ends_with_the_error_event() {
    let slow = mock(&[]);
    let r = router_with(&[&slow.url], FLAGS).await;
    let body = json!({"text": "a long one", "stream": true,
        "sampling_params": {"max_new_tokens": 100000, "ignore_eos": true}});
    let resp = post_json(&client(), &format!("{}/generate", r.url), &body).await;
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let first = stream.next().await.expect("a first chunk").unwrap();
    assert!(first.starts_with(b"data: "));
    signal(slow.pid(), "STOP");
    let mut rest = Vec::new();
    while let Some(chunk) = stream.next().await {
        rest.extend_from_slice(&chunk.expect("the SSE stream ends after its error event"));
    }
    signal(slow.pid(), "CONT");
    let tail = String::from_utf8_lossy(&rest);
    assert!(
        tail.ends_with("\"code\":\"upstream_stream_broken\"}}\n\n"),
        "{tail}"
    );
    assert!(metrics(&r.url).await.contains("kind=\"stalled\""));
}
