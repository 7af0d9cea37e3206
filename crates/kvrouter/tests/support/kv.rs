//! KV-routing helpers: mocks publishing ZMQ KV events, a KV-mode router, its
//! `/debug/index` polled with a deadline, deterministic prompts and `/generate` calls, and
//! batches of a fake publisher published until the index holds them.

use std::time::Duration;

use serde_json::{json, Value};

use super::fake_publisher::FakePublisher;
use super::procs::{self, Proc};
use super::wait::Deadline;

pub const ADMIN: &str = "admin-key";
pub const PAGE: usize = 4;

/// A mock with ZMQ KV events (+ replay) on ephemeral ports, page 4.
pub fn kv_mock(extra: &[&str]) -> Proc {
    let mut args = vec![
        "--page-size",
        "4",
        "--kv-events-config",
        r#"{"publisher":"zmq","endpoint":"tcp://*:0","replay_endpoint":"tcp://*:0"}"#,
    ];
    args.extend_from_slice(extra);
    procs::mock(&args)
}

/// A KV-mode router over `workers` (page 4, admin key set).
pub fn kv_router(workers: &[&str], extra: &[&str]) -> Proc {
    kv_router_paged("4", workers, extra)
}

/// A KV-mode router over `workers` with `--page-size page`, the admin key set and health
/// checks every 0.5 s, and `extra` flags.
pub fn kv_router_paged(page: &str, workers: &[&str], extra: &[&str]) -> Proc {
    let mut args = vec![
        "--mode",
        "kv",
        "--page-size",
        page,
        "--admin-api-key",
        ADMIN,
        "--health-check-interval-secs",
        "0.5",
    ];
    for w in workers {
        args.push("--worker-urls");
        args.push(w);
    }
    args.extend_from_slice(extra);
    procs::router(&args)
}

/// `GET /debug/index` of a router.
pub async fn debug_index(c: &reqwest::Client, router: &str) -> Value {
    c.get(format!("{router}/debug/index"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .expect("debug/index")
        .json()
        .await
        .expect("debug/index json")
}

/// Resident blocks of `worker` (all ranks) in the router's index.
pub fn blocks_of(index: &Value, worker: &str) -> u64 {
    index["units"]
        .as_array()
        .map(|u| {
            u.iter()
                .filter(|x| x["worker"] == worker)
                .map(|x| x["blocks"].as_u64().unwrap_or(0))
                .sum()
        })
        .unwrap_or(0)
}

/// Polls `/debug/index` until `done` holds (deadline 30 s); returns the last view.
pub async fn wait_index(
    c: &reqwest::Client,
    router: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Deadline::after(Duration::from_secs(30));
    loop {
        let v = debug_index(c, router).await;
        if done(&v) {
            return v;
        }
        deadline.check(&format!("{what}; last /debug/index: {v}"));
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until the router's index has `n` units (its workers' ranks registered).
pub async fn wait_units(c: &reqwest::Client, router: &str, n: usize) {
    wait_index(c, router, "the workers' units", |v| {
        v["units"].as_array().is_some_and(|u| u.len() == n)
    })
    .await;
}

/// Waits until the router subscribed to `n` ZMQ rank streams (workers registered).
pub async fn wait_sources(c: &reqwest::Client, router: &str, n: u64) {
    wait_index(c, router, "ZMQ sources", |v| {
        v["zmq_sources"].as_u64() == Some(n)
    })
    .await;
}

/// A deterministic prompt of `len` tokens from `seed`.
pub fn prompt(seed: u32, len: usize) -> Vec<u32> {
    (0..len as u32)
        .map(|i| 1 + (seed * 7919 + i * 31) % 30000)
        .collect()
}

/// The 16 tokens `seed * 100 + 0..16` (one router page of 16, or four of the mocks' 4).
pub fn page(seed: u32) -> Vec<u32> {
    (0..16).map(|i| seed * 100 + i).collect()
}

/// Publishes `payload` as batch `seq` of a fake SGLang publisher (replaying it on each try,
/// so a slow-joining subscriber gets it too) until the router's index holds `want` blocks of
/// `worker`; panics after 30 s.
pub async fn publish_until(
    publisher: &mut FakePublisher,
    c: &reqwest::Client,
    router: &str,
    worker: &str,
    seq: u64,
    payload: Vec<u8>,
    want: u64,
) {
    publisher.lose(seq, payload.clone());
    let deadline = Deadline::after(Duration::from_secs(30));
    loop {
        publisher.republish(seq, payload.clone()).await;
        if blocks_of(&debug_index(c, router).await, worker) == want {
            return;
        }
        deadline.check(&format!("{want} blocks of {worker} after batch {seq}"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `POST {base}/generate` with `input_ids`; returns (status, x-kvrouter-worker, body).
pub async fn generate(
    c: &reqwest::Client,
    base: &str,
    ids: &[u32],
    max_new: u32,
) -> (u16, Option<String>, Value) {
    let body = json!({"input_ids": ids, "sampling_params": {"max_new_tokens": max_new}});
    super::http::generate(c, base, &body).await
}

/// The worker a `/generate` of `ids` through `router` goes to (asserting a 200).
pub async fn routed(router: &str, ids: &[u32]) -> String {
    let (status, worker, body) = generate(&super::http::client(), router, ids, 1).await;
    assert_eq!(status, 200, "{body}");
    worker.expect("x-kvrouter-worker")
}

/// Makes sure the router's subscription to `worker` is live (ZMQ slow joiner): sends small
/// distinct prompts straight to the worker until the router's index shows its blocks.
pub async fn warm(c: &reqwest::Client, router: &str, worker: &str) {
    let deadline = Deadline::after(Duration::from_secs(30));
    let mut seed = 50_000;
    loop {
        seed += 1;
        let _ = generate(c, worker, &prompt(seed, 8), 1).await;
        if blocks_of(&debug_index(c, router).await, worker) > 0 {
            return;
        }
        deadline.check(&format!("the router to see {worker}'s KV events"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `warm` for every worker, then a snapshot of per-worker block counts.
pub async fn warm_all(c: &reqwest::Client, router: &str, workers: &[&str]) -> Vec<u64> {
    for w in workers {
        warm(c, router, w).await;
    }
    let v = debug_index(c, router).await;
    workers.iter().map(|w| blocks_of(&v, w)).collect()
}

/// Two fast KV mocks (`a`, `b`) behind a KV-mode router, both event sources connected and
/// both workers' caches warmed: the starting point of most KV-routing tests.
pub struct KvPair {
    pub a: Proc,
    pub b: Proc,
    pub router: Proc,
    pub c: reqwest::Client,
}

/// Starts and warms a [`KvPair`] (router started with `router_extra` flags).
pub async fn warm_kv_pair(router_extra: &[&str]) -> KvPair {
    let a = kv_mock(&["--speedup", "0"]);
    let b = kv_mock(&["--speedup", "0"]);
    let router = kv_router(&[&a.url, &b.url], router_extra);
    let c = super::http::client();
    wait_sources(&c, &router.url, 2).await;
    warm_all(&c, &router.url, &[&a.url, &b.url]).await;
    KvPair { a, b, router, c }
}
