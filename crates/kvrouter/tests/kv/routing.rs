//! KV-mode routing against real `sglang-mock` processes publishing ZMQ KV events:
//! routing by overlap, sibling stickiness under predict-on-route (and spreading without it),
//! worker restart (blocks vanish and return). Conditions are polled with deadlines.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use std::collections::HashMap;

use futures::future::join_all;
use support::http::client;
use support::kv::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_cached_on_worker_b_goes_to_b() {
    let KvPair {
        a: _a,
        b,
        router,
        c,
    } = warm_kv_pair(&[]).await;
    let p = prompt(1, 64); // 16 pages
    let (status, _, _) = generate(&c, &b.url, &p, 2).await;
    assert_eq!(status, 200);
    wait_index(&c, &router.url, "B's blocks", |v| {
        blocks_of(v, &b.url) >= 15
    })
    .await;
    for turn in 0..5u32 {
        let mut ids = p.clone();
        ids.extend(prompt(100 + turn, 8));
        let (status, worker, body) = generate(&c, &router.url, &ids, 2).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(worker.as_deref(), Some(b.url.as_str()), "turn {turn}");
        // The worker reports the hit the router predicted.
        assert!(
            body["meta_info"]["cached_tokens"].as_u64().unwrap_or(0) >= 60,
            "{body}"
        );
    }
    let metrics = support::http::get_text(&c, &format!("{}/metrics", router.url)).await;
    assert!(metrics.contains("kvrouter_kv_actual_hit_tokens_total"));
    assert!(metrics.contains("kvrouter_kv_decision_seconds_bucket{stage=\"match\""));
}

/// Fires `n` identical requests at once; returns requests per worker.
async fn burst(c: &reqwest::Client, router: &str, ids: &[u32], n: usize) -> HashMap<String, usize> {
    let calls = (0..n).map(|_| generate(c, router, ids, 8));
    let mut per = HashMap::new();
    for (status, worker, body) in join_all(calls).await {
        assert_eq!(status, 200, "{body}");
        *per.entry(worker.expect("worker header")).or_default() += 1;
    }
    per
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn siblings_share_one_prefill_under_predict_on_route() {
    let mocks: Vec<_> = (0..4).map(|_| kv_mock(&["--speedup", "1"])).collect();
    let urls: Vec<&str> = mocks.iter().map(|m| m.url.as_str()).collect();
    let router = kv_router(&urls, &[]);
    let c = client();
    wait_sources(&c, &router.url, 4).await;
    let base = warm_all(&c, &router.url, &urls).await;
    let ids = prompt(7, 256);
    let per = burst(&c, &router.url, &ids, 32).await;
    assert_eq!(per.len(), 1, "siblings spread: {per:?}");
    // One prefill in the fleet: the prompt's pages are resident on that worker only.
    let (only, _) = per.iter().next().unwrap();
    let at = urls.iter().position(|u| u == only).unwrap();
    let v = wait_index(&c, &router.url, "the prompt's pages", |v| {
        blocks_of(v, only) >= base[at] + 63
    })
    .await;
    for (i, u) in urls.iter().enumerate() {
        if i != at {
            assert_eq!(blocks_of(&v, u), base[i], "{u} prefilled too: {v}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_prediction_a_burst_spreads() {
    let mocks: Vec<_> = (0..4).map(|_| kv_mock(&["--speedup", "1"])).collect();
    let urls: Vec<&str> = mocks.iter().map(|m| m.url.as_str()).collect();
    let router = kv_router(&urls, &["--no-predict"]);
    let c = client();
    wait_sources(&c, &router.url, 4).await;
    warm_all(&c, &router.url, &urls).await;
    let per = burst(&c, &router.url, &prompt(8, 256), 32).await;
    assert!(
        per.len() >= 2,
        "no-predict burst stayed on one worker: {per:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_worker_loses_its_blocks_and_gets_them_back() {
    let http = support::free_port().to_string();
    let zmq = support::free_port();
    let replay = support::free_port();
    let cfg = format!(
        r#"{{"publisher":"zmq","endpoint":"tcp://*:{zmq}","replay_endpoint":"tcp://*:{replay}"}}"#
    );
    let start = || {
        support::Proc::spawn(
            &support::procs::sim_bin("sglang-mock"),
            &[
                "--host",
                "127.0.0.1",
                "--port",
                &http,
                "--page-size",
                "4",
                "--speedup",
                "0",
                "--kv-events-config",
                &cfg,
            ],
        )
    };
    let mut w = start();
    let url = w.url.clone();
    let router = kv_router(&[&url], &["--health-failure-threshold", "1"]);
    let c = client();
    wait_sources(&c, &router.url, 1).await;
    warm(&c, &router.url, &url).await;
    let old = prompt(3, 64);
    assert_eq!(generate(&c, &router.url, &old, 2).await.0, 200);
    wait_index(&c, &router.url, "blocks before restart", |v| {
        blocks_of(v, &url) >= 18
    })
    .await;
    w.kill();
    // Down long enough for the router's health check to notice (a restart is then reported
    // by the registry when the new process answers).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while c
        .get(format!("{}/readiness", router.url))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
        != 503
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "router never saw the worker down"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let _w2 = start();
    // Requests on the new process make it publish from sequence 0 again; the router's
    // subscriber reconnects on its own (it may miss the first batches: slow joiner), sees the
    // sequence go back (restart) and clears the rank. Poll with fresh prompts until it did.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut seed = 10;
    loop {
        seed += 1;
        let _ = generate(&c, &url, &prompt(seed, 4), 1).await;
        let n = blocks_of(&debug_index(&c, &router.url).await, &url);
        if n < 16 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "old blocks never vanished ({n} resident)"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // The subscriber reconnects to the new process by itself.
    warm(&c, &router.url, &url).await;
    let before = blocks_of(&debug_index(&c, &router.url).await, &url);
    assert_eq!(generate(&c, &url, &old, 2).await.0, 200);
    wait_index(&c, &router.url, "blocks to return", |v| {
        blocks_of(v, &url) >= before + 16
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_through_the_router_empties_the_index_before_it_answers() {
    let w = kv_mock(&["--speedup", "0"]);
    let router = kv_router(&[&w.url], &[]);
    let c = client();
    wait_sources(&c, &router.url, 1).await;
    warm(&c, &router.url, &w.url).await;
    assert_eq!(generate(&c, &router.url, &prompt(5, 64), 2).await.0, 200);
    wait_index(&c, &router.url, "blocks", |v| blocks_of(v, &w.url) >= 16).await;
    let r = c
        .post(format!("{}/flush_cache", router.url))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    // The refit plane's cache hook cleared the index synchronously: no waiting for events.
    let v = debug_index(&c, &router.url).await;
    assert_eq!(blocks_of(&v, &w.url), 0, "{v}");
}
