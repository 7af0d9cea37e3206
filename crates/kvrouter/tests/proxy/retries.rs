//! Retries as sgl-router makes them: a worker's 408/429/500/502/503/504 before the first byte is
//! retried on another worker (or, alone, on the same one up to `--retry-max-retries` attempts,
//! then relayed), a worker killed while it holds the request is retried elsewhere, and every
//! failed attempt's booking is released.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion
#![allow(clippy::disallowed_methods)] // fixtures spawn their own tasks; `Tasks` is the router's

use crate::support;

use serde_json::{json, Value};
use support::admin::workers;
use support::http::{client, generate, metrics, post_json};
use support::procs::*;
use support::stub::*;
use support::wait::wait_for;

fn small() -> Value {
    json!({"text":"hello","sampling_params":{"max_new_tokens":2}})
}

async fn all_released(router: &str) {
    let r = router.to_string();
    wait_for("every booking released", || {
        let r = r.clone();
        async move {
            workers(&r).await["workers"]
                .as_array()
                .is_some_and(|ws| ws.iter().all(|w| w["in_flight"] == 0))
        }
    })
    .await;
}

/// A worker answering `status` beside a mock, round-robin: four requests all come back 200
/// from the mock, the stub having been tried (and retried away from) on the way.
async fn retried_away_from(status: u16) -> (Stub, Proc, Proc) {
    let stub = Stub::start(Behaviour::Status(status)).await;
    let m = fast_mock();
    let r = router_with(
        &[&stub.url, &m.url],
        &[
            "--mode",
            "round-robin",
            "--health-failure-threshold",
            "1000",
        ],
    )
    .await;
    let c = client();
    for _ in 0..4 {
        let (status, worker, _) = generate(&c, &r.url, &small()).await;
        assert_eq!(status, 200);
        assert_eq!(worker.as_deref(), Some(m.url.as_str()));
    }
    assert!(!stub.received.lock().is_empty(), "the stub was tried");
    (stub, m, r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_is_retried_on_another_worker() {
    let (_stub, _m, r) = retried_away_from(500).await;
    assert!(metrics(&r.url)
        .await
        .contains("kvrouter_retries_total{reason=\"500\",route=\"generate\"}"));
    all_released(&r.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_is_retried_elsewhere_and_passed_through_when_alone() {
    let (stub, _m, _r) = retried_away_from(503).await;
    // Alone, the worker's own 503 comes back unchanged.
    let r2 = router_with(&[&stub.url], &["--health-failure-threshold", "1000"]).await;
    let resp = post_json(&client(), &format!("{}/generate", r2.url), &small()).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["x-kvrouter-worker"], stub.url.as_str());
    assert_eq!(
        resp.json::<Value>().await.unwrap(),
        json!({"detail": "stub status"})
    );
}

/// Alone, every retried status is tried `--retry-max-retries` times in all (sgl-router's
/// count), then the worker's own answer is relayed; other statuses are tried once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alone_each_retried_status_is_tried_max_retries_times_then_relayed() {
    let stub = Stub::start(Behaviour::Status(500)).await;
    let r = router_with(
        &[&stub.url],
        &[
            "--health-failure-threshold",
            "1000",
            "--cb-failure-threshold",
            "1000",
            "--retry-max-retries",
            "3",
            "--retry-max-backoff-ms",
            "20",
        ],
    )
    .await;
    let c = client();
    for (status, attempts) in [
        (408, 3),
        (429, 3),
        (500, 3),
        (502, 3),
        (503, 3),
        (504, 3),
        (400, 1),
        (501, 1),
    ] {
        stub.set(Behaviour::Status(status));
        stub.received.lock().clear();
        let resp = post_json(&c, &format!("{}/generate", r.url), &small()).await;
        assert_eq!(resp.status().as_u16(), status);
        assert_eq!(resp.headers()["x-kvrouter-worker"], stub.url.as_str());
        assert_eq!(
            resp.json::<Value>().await.unwrap(),
            json!({"detail": "stub status"}),
            "the worker's own answer"
        );
        assert_eq!(stub.received.lock().len(), attempts, "HTTP {status}");
    }
    all_released(&r.url).await;
}

/// A worker killed while it holds the request (the connection dies before the response head)
/// is retried on another worker: the client gets 200, not 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_before_answering_is_retried_elsewhere() {
    let mut slow = mock(&[]);
    let fast = fast_mock();
    // Slow health checks: the killed worker stays "healthy", so only the retry saves the request.
    let r = router_with(
        &[&slow.url, &fast.url],
        &[
            "--mode",
            "round-robin",
            "--health-check-interval-secs",
            "600",
        ],
    )
    .await;
    let c = client();
    let long =
        json!({"text":"a long one","sampling_params":{"max_new_tokens":100000,"ignore_eos":true}});
    // Round-robin: one of the first two requests goes to the slow worker.
    let mut held = None;
    for _ in 0..2 {
        let (c2, url, body) = (c.clone(), format!("{}/generate", r.url), long.clone());
        let req = tokio::spawn(async move { c2.post(url).json(&body).send().await });
        let slow_url = slow.url.clone();
        let mut on_slow = false;
        wait_for(
            "the request is answered or running on the slow worker",
            || {
                let (c, slow_url) = (client(), slow_url.clone());
                let finished = req.is_finished();
                async move {
                    let load: Value =
                        support::http::get_json(&c, &format!("{slow_url}/v1/loads?include=core"))
                            .await;
                    finished
                        || load["loads"][0]["num_running_reqs"].as_u64().unwrap_or(0)
                            + load["loads"][0]["num_waiting_reqs"].as_u64().unwrap_or(0)
                            > 0
                }
            },
        )
        .await;
        if !req.is_finished() {
            on_slow = true;
        }
        if on_slow {
            held = Some(req);
            break;
        }
        assert_eq!(req.await.unwrap().unwrap().status(), 200);
    }
    let held = held.expect("one request reached the slow worker");
    slow.kill();
    let resp = held.await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-kvrouter-worker"], fast.url.as_str());
    assert!(metrics(&r.url)
        .await
        .contains("kvrouter_retries_total{reason=\"io\",route=\"generate\"}"));
    all_released(&r.url).await;
}
