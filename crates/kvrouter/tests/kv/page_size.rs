//! Worker page sizes other than the router's, against real `sglang-mock` processes:
//! SGLang's default page size 1 served in round-robin and least-load, KV-routed behind
//! `--mode kv --page-size 16` (its single-token KV events folded into router blocks:
//! prefix affinity, predict-on-route siblings), and page sizes that cannot be folded
//! refused in kv mode with what to change, yet served in round-robin.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use futures::future::join_all;
use serde_json::Value;
use support::admin::{assert_error, workers};
use support::http::client;
use support::kv::{blocks_of, debug_index, generate, prompt, wait_index, wait_sources, ADMIN};
use support::procs::{self, router_with, start_router, Proc};
use support::wait::Deadline;

/// The router's block size in the KV tests of this file.
const ROUTER_PAGE: &str = "16";

/// A mock at `page` tokens per page publishing ZMQ KV events (+ replay) on ephemeral ports.
fn kv_mock_at(page: &str, speedup: &str) -> Proc {
    procs::mock(&[
        "--page-size",
        page,
        "--speedup",
        speedup,
        "--kv-events-config",
        r#"{"publisher":"zmq","endpoint":"tcp://*:0","replay_endpoint":"tcp://*:0"}"#,
    ])
}

/// A kv-mode router at `--page-size 16` over `workers` (admin key set, for `/debug/index`),
/// waiting until it subscribed to every worker's events (all registered).
async fn kv_router_16(c: &reqwest::Client, workers: &[&str]) -> Proc {
    let mut args = vec![
        "--mode",
        "kv",
        "--page-size",
        ROUTER_PAGE,
        "--admin-api-key",
        ADMIN,
    ];
    for w in workers {
        args.extend(["--worker-urls", w]);
    }
    let r = procs::router(&args);
    wait_sources(c, &r.url, workers.len() as u64).await;
    r
}

/// Sends small distinct prompts (two router blocks each) straight to `worker` until the
/// router's index shows its blocks: its event subscription is live and folding.
async fn warm(c: &reqwest::Client, router: &str, worker: &str) {
    let deadline = Deadline::after(Duration::from_secs(30));
    // prompt() repeats with a period of 30000 seeds: stay clear of the tests' own seeds.
    let mut seed = 45_000;
    loop {
        seed += 1;
        let _ = generate(c, worker, &prompt(seed, 40), 1).await;
        if blocks_of(&debug_index(c, router).await, worker) > 0 {
            return;
        }
        deadline.check(&format!("the router to fold {worker}'s KV events"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Requests per serving worker of `n` `/generate` calls with `ids` through `router`, sent
/// at once (`together`) or one after another.
async fn spread(
    c: &reqwest::Client,
    router: &str,
    ids: &[u32],
    n: usize,
    together: bool,
) -> HashMap<String, usize> {
    let mut per = HashMap::new();
    let mut count = |(status, worker, body): (u16, Option<String>, Value)| {
        assert_eq!(status, 200, "{body}");
        *per.entry(worker.expect("x-kvrouter-worker")).or_default() += 1;
    };
    if together {
        for r in join_all((0..n).map(|_| generate(c, router, ids, 8))).await {
            count(r);
        }
    } else {
        for _ in 0..n {
            count(generate(c, router, ids, 2).await);
        }
    }
    per
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_size_one_fleet_is_served_in_round_robin_and_least_load() {
    let mocks: Vec<Proc> = (0..3)
        .map(|_| procs::mock(&["--page-size", "1", "--speedup", "0"]))
        .collect();
    let urls: Vec<&str> = mocks.iter().map(|m| m.url.as_str()).collect();
    let c = client();
    for mode in ["round-robin", "least-load"] {
        // Registered (no 503): router_with waits until all three are routable.
        let r = router_with(&urls, &["--mode", mode]).await;
        let per = spread(&c, &r.url, &prompt(1, 64), 6, false).await;
        assert_eq!(per.values().sum::<usize>(), 6);
        if mode == "round-robin" {
            assert_eq!(per.len(), 3, "{mode}: {per:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_size_one_workers_are_kv_routed_with_prefix_affinity() {
    let (a, b) = (kv_mock_at("1", "0"), kv_mock_at("1", "0"));
    let c = client();
    let router = kv_router_16(&c, &[&a.url, &b.url]).await;
    for w in [&a.url, &b.url] {
        warm(&c, &router.url, w).await;
    }
    let before = blocks_of(&debug_index(&c, &router.url).await, &b.url);
    // 256 tokens straight to B: 256 single-token pages, 16 router blocks.
    let shared = prompt(2, 256);
    assert_eq!(generate(&c, &b.url, &shared, 2).await.0, 200);
    let v = wait_index(&c, &router.url, "B's folded blocks", |v| {
        blocks_of(v, &b.url) >= before + 16
    })
    .await;
    assert_eq!(v["page_size"], 16, "{v}");
    for turn in 0..4u32 {
        let mut ids = shared.clone();
        ids.extend(prompt(300 + turn, 24));
        let (status, worker, body) = generate(&c, &router.url, &ids, 2).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(worker.as_deref(), Some(b.url.as_str()), "turn {turn}");
        // SGLang at page size 1 matches all but the last prompt token: the whole prefix.
        assert!(
            body["meta_info"]["cached_tokens"].as_u64().unwrap_or(0) >= 256,
            "{body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_size_one_siblings_share_one_prefill_under_predict_on_route() {
    let mocks: Vec<Proc> = (0..3).map(|_| kv_mock_at("1", "1")).collect();
    let urls: Vec<&str> = mocks.iter().map(|m| m.url.as_str()).collect();
    let c = client();
    let router = kv_router_16(&c, &urls).await;
    for w in &urls {
        warm(&c, &router.url, w).await;
    }
    let v = debug_index(&c, &router.url).await;
    let base: Vec<u64> = urls.iter().map(|u| blocks_of(&v, u)).collect();
    let ids = prompt(9, 256);
    let per = spread(&c, &router.url, &ids, 24, true).await;
    assert_eq!(per.len(), 1, "siblings spread: {per:?}");
    // One prefill in the fleet: the prompt's blocks are resident on that worker only.
    let (only, _) = per.iter().next().unwrap();
    let at = urls.iter().position(|u| u == only).unwrap();
    let v = wait_index(&c, &router.url, "the prompt's folded blocks", |v| {
        blocks_of(v, only) >= base[at] + 16
    })
    .await;
    for (i, u) in urls.iter().enumerate() {
        if i != at {
            assert_eq!(blocks_of(&v, u), base[i], "{u} prefilled too: {v}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfoldable_page_sizes_are_refused_in_kv_mode_and_served_in_round_robin() {
    let (w24, w32) = (
        procs::mock(&["--page-size", "24", "--speedup", "0"]),
        procs::mock(&["--page-size", "32", "--speedup", "0"]),
    );
    let kv = start_router(&["--mode", "kv", "--page-size", ROUTER_PAGE]);
    let c = client();
    for (w, suggested) in [(&w24, "48"), (&w32, "32")] {
        let v = assert_error(
            c.post(format!("{}/add_worker?url={}", kv.url, enc(&w.url))),
            400,
            "page_size_mismatch",
        )
        .await;
        assert_refusal(v["error"]["message"].as_str().unwrap(), suggested);
    }
    assert_eq!(workers(&kv.url).await["total"], 0);
    // Round-robin hashes nothing: both are served.
    let rr = router_with(&[&w24.url, &w32.url], &["--mode", "round-robin"]).await;
    let per = spread(&c, &rr.url, &prompt(3, 64), 4, false).await;
    assert_eq!(per.len(), 2, "{per:?}");
}

/// The refusal names the sizes and both ways out.
fn assert_refusal(msg: &str, suggested: &str) {
    assert!(
        msg.contains("--page-size 16") && msg.contains("Start SGLang with --page-size 16"),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("give the router --page-size {suggested}")),
        "{msg}"
    );
}

fn enc(url: &str) -> String {
    url::form_urlencoded::byte_serialize(url.as_bytes()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mock_at_page_size_one_publishes_one_page_per_token() {
    use support::sglang_wire::Ev;
    use support::zmq::{kv_config, synced_sub};
    let cfg =
        serde_json::json!({"publisher": "zmq", "endpoint": "tcp://*:0", "topic": "kv"}).to_string();
    let m = procs::mock(&[
        "--page-size",
        "1",
        "--speedup",
        "0",
        "--kv-events-config",
        &cfg,
    ]);
    let kv = kv_config(&m.url).await;
    let ep = kv["endpoint"].as_str().unwrap().to_string();
    let mut sub = synced_sub(&m.url, &ep, "kv").await;
    let ids: Vec<u32> = (1..=5).collect();
    let c = client();
    let (status, _, body) = generate(&c, &m.url, &ids, 2).await;
    assert_eq!(status, 200, "{body}");
    // SGLang at page size 1 matches every prompt token but the last.
    let (status, _, body) = generate(&c, &m.url, &ids, 2).await;
    assert_eq!(status, 200);
    assert_eq!(body["meta_info"]["cached_tokens"], 4, "{body}");
    let evs = sub
        .until(|e| {
            e.iter()
                .filter_map(|x| match x {
                    Ev::Stored { tokens, .. } => Some(tokens.len()),
                    _ => None,
                })
                .sum::<usize>()
                >= 5
        })
        .await;
    let Some(Ev::Stored {
        hashes,
        parent,
        tokens,
        block_size,
        ..
    }) = evs.iter().find(|e| matches!(e, Ev::Stored { .. }))
    else {
        unreachable!()
    };
    assert_eq!(*block_size, 1);
    assert_eq!(*parent, None);
    assert_eq!(hashes.len(), tokens.len(), "one hash per token");
    assert_eq!(&tokens[..2], &[1, 2]);
    // SGLang's chained page hashes: sha256(le32([1])), then sha256(h0 || le32([2]))
    // (python hashlib reference values).
    assert_eq!(hashes[0], 7470307888890966271);
    assert_eq!(hashes[1], -1634645291211865391);
}
