//! Faults: retries before the first byte, health transitions, a worker killed mid-stream,
//! a worker that never answers, all workers down, client disconnects, and workers added and
//! removed under load.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion
#![allow(clippy::disallowed_methods)] // fixtures spawn their own tasks; `Tasks` is the router's

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use serde_json::{json, Value};
use support::admin::*;
use support::http::{client, metrics, post_json, status_of};
use support::procs::*;
use support::stub::*;
use support::wait::wait_for;

fn small() -> Value {
    json!({"text":"hello","sampling_params":{"max_new_tokens":2}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_failures_are_retried_on_another_worker() {
    let (a, mut b) = (fast_mock(), fast_mock());
    // Slow health checks: the dead worker stays "healthy", so only retries can save requests.
    let r = router_with(
        &[&a.url, &b.url],
        &[
            "--mode",
            "round-robin",
            "--health-check-interval-secs",
            "600",
        ],
    )
    .await;
    b.kill();
    let c = client();
    for _ in 0..6 {
        let resp = post_json(&c, &format!("{}/generate", r.url), &small()).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["x-kvrouter-worker"], a.url.as_str());
    }
    assert!(metrics(&r.url)
        .await
        .contains("kvrouter_retries_total{reason=\"connect\",route=\"generate\"}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhealthy_workers_are_skipped_and_return() {
    let (a, b) = (fast_mock(), fast_mock());
    let r = router_with(&[&a.url, &b.url], &["--mode", "round-robin"]).await;
    let c = client();
    c.post(format!("{}/mock/set_health", b.url))
        .json(&json!({"healthy": false}))
        .send()
        .await
        .unwrap();
    wait_healthy_count(&r.url, 1).await;
    for _ in 0..4 {
        let resp = post_json(&c, &format!("{}/generate", r.url), &small()).await;
        assert_eq!(resp.headers()["x-kvrouter-worker"], a.url.as_str());
    }
    c.post(format!("{}/mock/set_health", b.url))
        .json(&json!({"healthy": true}))
        .send()
        .await
        .unwrap();
    wait_healthy_count(&r.url, 2).await;
    let mut used = std::collections::HashSet::new();
    for _ in 0..4 {
        let resp = post_json(&c, &format!("{}/generate", r.url), &small()).await;
        used.insert(
            resp.headers()["x-kvrouter-worker"]
                .to_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(used.len(), 2, "the recovered worker serves again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_killed_mid_stream_gives_a_clean_end() {
    let mut slow = mock(&[]);
    let r = router_with(&[&slow.url], &[]).await;
    let c = client();
    let body = json!({"text":"a long one","stream":true,"sampling_params":{"max_new_tokens":100000,"ignore_eos":true}});
    let resp = post_json(&c, &format!("{}/generate", r.url), &body).await;
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let first = stream
        .next()
        .await
        .expect("a first chunk")
        .expect("ok chunk");
    assert!(first.starts_with(b"data: "));
    slow.kill();
    let mut rest = Vec::new();
    while let Some(chunk) = stream.next().await {
        rest.extend_from_slice(&chunk.expect("the stream ends cleanly, without a transport error"));
    }
    let tail = String::from_utf8_lossy(&rest);
    assert!(
        tail.contains("upstream_stream_broken"),
        "final error event: {tail}"
    );
    assert_eq!(status_of(c.get(format!("{}/health", r.url))).await, 200);
    let ru = r.url.clone();
    wait_for("booking released", || {
        let ru = ru.clone();
        async move {
            workers(&ru).await["workers"]
                .as_array()
                .is_none_or(|ws| ws.iter().all(|w| w["in_flight"] == 0))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_never_answers_times_out() {
    let stub = Stub::start(Behaviour::Hang).await;
    let r = router_with(&[&stub.url], &["--request-timeout-secs", "0.3"]).await;
    let resp = post_json(&client(), &format!("{}/generate", r.url), &small()).await;
    assert_eq!(resp.status(), 504);
    assert_eq!(resp.headers()["x-kvrouter-worker"], stub.url.as_str());
    assert_error_shape(&resp.json().await.unwrap(), "upstream_timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_workers_down_gives_503() {
    let (mut a, mut b) = (fast_mock(), fast_mock());
    let r = router_with(&[&a.url, &b.url], &["--health-check-interval-secs", "600"]).await;
    a.kill();
    b.kill();
    assert_error(
        client().post(format!("{}/generate", r.url)).json(&small()),
        503,
        "upstream_unavailable",
    )
    .await;
    // Once health checks notice, the answer is "no healthy worker".
    let r2 = router_with(&[], &[]).await;
    assert_error(
        client().post(format!("{}/generate", r2.url)).json(&small()),
        503,
        "no_available_workers",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_aborts_the_upstream_request() {
    let slow = mock(&[]);
    let r = router_with(&[&slow.url], &[]).await;
    let c = client();
    let body = json!({"text":"long","rid":"to-abort","stream":true,
                      "sampling_params":{"max_new_tokens":100000,"ignore_eos":true}});
    let resp = post_json(&c, &format!("{}/generate", r.url), &body).await;
    let mut stream = resp.bytes_stream();
    stream.next().await.expect("first chunk").expect("ok");
    drop(stream);
    let (ru, mu) = (r.url.clone(), slow.url.clone());
    wait_for("router booking released", || {
        let ru = ru.clone();
        async move { workers(&ru).await["workers"][0]["in_flight"] == 0 }
    })
    .await;
    wait_for("mock stopped generating", || {
        let mu = mu.clone();
        async move { support::http::mock_load(&mu).await == (0, 0) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_added_and_removed_under_load_lose_no_request() {
    let (a, b, c3) = (fast_mock(), fast_mock(), fast_mock());
    let r = router_with(&[&a.url, &b.url], &["--mode", "round-robin"]).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (url, stop, ok, failed) = (r.url.clone(), stop.clone(), ok.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            let c = reqwest::Client::new();
            while !stop.load(Ordering::Relaxed) {
                let resp = c
                    .post(format!("{url}/generate"))
                    .json(&small())
                    .send()
                    .await;
                let good = match resp {
                    Ok(r) => r.status() == 200 && r.bytes().await.is_ok(),
                    Err(_) => false,
                };
                if good {
                    ok.fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let c = client();
    let before = ok.load(Ordering::Relaxed);
    let ok2 = ok.clone();
    wait_for("traffic flowing", || {
        let ok2 = ok2.clone();
        async move { ok2.load(Ordering::Relaxed) > before + 20 }
    })
    .await;
    let resp = post_json(&c, &format!("{}/workers", r.url), &json!({"url": c3.url})).await;
    assert_eq!(resp.status(), 202);
    wait_healthy_count(&r.url, 3).await;
    let resp = c
        .delete(format!(
            "{}/workers/{}",
            r.url,
            url::form_urlencoded::byte_serialize(a.url.as_bytes()).collect::<String>()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let ru = r.url.clone();
    wait_for("worker a removed", || {
        let ru = ru.clone();
        async move { workers(&ru).await["total"] == 2 }
    })
    .await;
    let mark = ok.load(Ordering::Relaxed);
    wait_for("traffic after removal", || {
        let ok2 = ok.clone();
        async move { ok2.load(Ordering::Relaxed) > mark + 20 }
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "requests lost during add/remove"
    );
    let served: Value = workers(&r.url).await;
    let urls: Vec<&str> = served["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["url"].as_str().unwrap())
        .collect();
    assert!(urls.contains(&c3.url.as_str()) && !urls.contains(&a.url.as_str()));
}
