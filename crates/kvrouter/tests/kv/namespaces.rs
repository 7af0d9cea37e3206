//! Namespaced blocks end to end: the router binary over two fake SGLang 0.5.23 workers whose
//! publishers (written here, on loopback) send tagged-map `BlockStored` events with `cache_salt`
//! / `lora_name`. A request matches only the stores of its own namespace (salt, adapter from
//! `lora_path` or an OpenAI `model: "base:adapter"`), predictions are booked under the same
//! namespaced hashes, a worker's decoy copy of an adapter's pages (same `lora_name`, other
//! engine hashes: SGLang's copy under an `extra_key`) can be evicted without losing the worker
//! as the holder of the real copy, and a namespace field of the wrong JSON type is a 400.
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

use crate::support;

use std::time::Duration;

use rmpv::Value as V;
use serde_json::{json, Value};
use support::fake_publisher::FakePublisher;
use support::fake_worker::{bind_true_publisher, port_of, server_info_0_5_23, FakeWorker};
use support::kv::{blocks_of, debug_index, kv_router_paged, prompt, wait_index, wait_sources};
use support::sglang_wire::batch;
use support::wait::Deadline;

const PAGE: usize = 16;

/// A tagged-map `BlockStored` (SGLang 0.5.23, `omit_defaults`) of whole pages of `tokens`.
fn stored(hashes: &[i64], tokens: &[u32], salt: Option<&str>, lora: Option<&str>) -> V {
    assert_eq!(tokens.len(), hashes.len() * PAGE);
    let mut m = vec![
        (V::from("type"), V::from("BlockStored")),
        (
            V::from("block_hashes"),
            V::Array(hashes.iter().map(|h| V::from(*h)).collect()),
        ),
        (V::from("parent_block_hash"), V::Nil),
        (
            V::from("token_ids"),
            V::Array(tokens.iter().map(|t| V::from(*t)).collect()),
        ),
        (V::from("block_size"), V::from(PAGE as u64)),
        (V::from("lora_id"), V::Nil),
        (V::from("medium"), V::from("GPU")),
    ];
    if let Some(s) = salt {
        m.push((V::from("cache_salt"), V::from(s)));
    }
    if let Some(l) = lora {
        m.push((V::from("lora_name"), V::from(l)));
    }
    V::Map(m)
}

fn removed(hashes: &[i64]) -> V {
    V::Map(vec![
        (V::from("type"), V::from("BlockRemoved")),
        (
            V::from("block_hashes"),
            V::Array(hashes.iter().map(|h| V::from(*h)).collect()),
        ),
        (V::from("medium"), V::from("GPU")),
    ])
}

/// Engine hashes `base..base + n` (opaque to the router).
fn hashes(base: i64, n: usize) -> Vec<i64> {
    (0..n as i64).map(|i| base + i).collect()
}

/// A fake 0.5.23 worker whose `kv_events` block advertises `publisher`.
async fn worker_of(publisher: &FakePublisher) -> FakeWorker {
    let (config, block) = bind_true_publisher(
        port_of(&publisher.endpoint),
        port_of(&publisher.replay_endpoint),
    );
    FakeWorker::start(server_info_0_5_23(&config, block, 0)).await
}

/// Publishes `payload` as batch 0 until the router indexes `blocks` blocks of `worker` (the
/// SUB link is live from then on; repeats of seq 0 are stale).
async fn publish_first(
    c: &reqwest::Client,
    router: &str,
    publisher: &mut FakePublisher,
    worker: &str,
    payload: Vec<u8>,
    blocks: u64,
) {
    publisher.lose(0, payload.clone());
    let deadline = Deadline::after(Duration::from_secs(30));
    loop {
        publisher.republish(0, payload.clone()).await;
        if blocks_of(&debug_index(c, router).await, worker) == blocks {
            return;
        }
        deadline.check(&format!("the router to index {blocks} blocks of {worker}"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// POSTs `body` to `{router}{path}`: (status, serving worker, body text).
async fn send(
    c: &reqwest::Client,
    router: &str,
    path: &str,
    body: &Value,
) -> (u16, Option<String>, String) {
    let r = c
        .post(format!("{router}{path}"))
        .json(body)
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    let worker = r
        .headers()
        .get("x-kvrouter-worker")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (status, worker, r.text().await.unwrap_or_default())
}

/// The worker `body` is routed to (asserting a 200).
async fn routed(c: &reqwest::Client, router: &str, path: &str, body: Value) -> String {
    let (status, worker, text) = send(c, router, path, &body).await;
    assert_eq!(status, 200, "{path} {body}: {text}");
    worker.expect("x-kvrouter-worker")
}

#[tokio::test]
async fn requests_match_only_stores_of_their_namespace() {
    let mut pa = FakePublisher::bind("").await;
    let mut pb = FakePublisher::bind("").await;
    let (wa, wb) = (worker_of(&pa).await, worker_of(&pb).await);
    let (a, b) = (wa.url.clone(), wb.url.clone());
    let router = kv_router_paged("16", &[&a, &b], &[]);
    let c = support::http::client();
    wait_sources(&c, &router.url, 2).await;

    // P: 4 pages; Q: 2 pages; R: 8 pages (plus a partial page each, as prompts have).
    let p = prompt(1, 4 * PAGE + 3);
    let q = prompt(2, 2 * PAGE + 5);
    let r = prompt(3, 8 * PAGE + 1);
    // Worker A: P's first page salted "tenant-a"; Q (2 pages) and R (8 pages) of adapter
    // "sql"; and a decoy: R's first 2 pages again under "sql" with other engine hashes.
    let a_stores = batch(vec![
        stored(&hashes(100, 1), &p[..PAGE], Some("tenant-a"), None),
        stored(&hashes(200, 2), &q[..2 * PAGE], None, Some("sql")),
        stored(&hashes(300, 8), &r[..8 * PAGE], None, Some("sql")),
        stored(&hashes(400, 2), &r[..2 * PAGE], None, Some("sql")),
    ]);
    // Worker B: P's first 3 pages and Q's first page in the default namespace, Q of adapter
    // "other", R's first 4 pages of adapter "sql".
    let b_stores = batch(vec![
        stored(&hashes(500, 3), &p[..3 * PAGE], None, None),
        stored(&hashes(600, 1), &q[..PAGE], None, None),
        stored(&hashes(650, 2), &q[..2 * PAGE], None, Some("other")),
        stored(&hashes(700, 4), &r[..4 * PAGE], None, Some("sql")),
    ]);
    publish_first(&c, &router.url, &mut pa, &a, a_stores, 13).await;
    publish_first(&c, &router.url, &mut pb, &b, b_stores, 10).await;

    let gen = "/generate";
    // Tenant A's salted page is on A only; B's plain pages are no hit for it.
    assert_eq!(
        routed(
            &c,
            &router.url,
            gen,
            json!({"input_ids": p, "cache_salt": "tenant-a"})
        )
        .await,
        a
    );
    // The plain prompt goes to B's 3 plain pages; A's salted page and the 4-page prediction
    // just booked there under tenant-a's hashes are not its blocks.
    assert_eq!(
        routed(&c, &router.url, gen, json!({"input_ids": p})).await,
        b
    );
    // Tenant B has nothing anywhere: its first request lands somewhere, the next ones follow
    // its own prediction there.
    let tenant_b = json!({"input_ids": p, "cache_salt": "tenant-b"});
    let first = routed(&c, &router.url, gen, tenant_b.clone()).await;
    for _ in 0..3 {
        assert_eq!(routed(&c, &router.url, gen, tenant_b.clone()).await, first);
    }

    // The adapter's pages: by `lora_path` on /generate, by `model: "base:adapter"` on the
    // OpenAI endpoints (served model name "dummy"), where the model wins over `lora_path`
    // (adapter "other" would have gone to B).
    assert_eq!(
        routed(
            &c,
            &router.url,
            gen,
            json!({"input_ids": q, "lora_path": "sql"})
        )
        .await,
        a
    );
    assert_eq!(
        routed(
            &c,
            &router.url,
            "/v1/completions",
            json!({"model": "dummy:sql", "prompt": q, "lora_path": "other"})
        )
        .await,
        a
    );
    assert_eq!(
        routed(
            &c,
            &router.url,
            "/v1/chat/completions",
            json!({"model": "dummy:sql", "messages": [], "input_ids": q})
        )
        .await,
        a
    );
    // The base model's request for Q goes to B's plain page, not to A's adapter pages.
    assert_eq!(
        routed(
            &c,
            &router.url,
            "/v1/completions",
            json!({"model": "dummy", "prompt": q})
        )
        .await,
        b
    );

    // A evicts the decoy copy (2 pages); its 8-page copy of R stays, and with it A as the
    // holder: the adapter request for R goes to A's 8 pages, not B's 4.
    pa.publish(1, batch(vec![removed(&hashes(400, 2))])).await;
    wait_index(&c, &router.url, "the decoy's removal", |v| {
        blocks_of(v, &a) == 11
    })
    .await;
    assert_eq!(
        routed(
            &c,
            &router.url,
            gen,
            json!({"input_ids": r, "lora_path": "sql"})
        )
        .await,
        a
    );

    // A namespace field of the wrong JSON type is refused, naming the field.
    for (field, value) in [
        ("cache_salt", json!(5)),
        ("extra_key", json!(["x"])),
        ("lora_path", json!({"name": "sql"})),
    ] {
        let mut body = json!({"input_ids": p});
        body[field] = value;
        let (status, _, text) = send(&c, &router.url, gen, &body).await;
        assert_eq!(status, 400, "{body}: {text}");
        assert!(text.contains(field), "{text}");
    }
    pa.shut_down().await;
    pb.shut_down().await;
}
