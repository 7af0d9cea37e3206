//! Cache tiers on loopback: fake SGLang 0.5.23 workers (`/server_info` with a `kv_events`
//! block) whose publishers send HiCache events as msgspec tagged maps with `medium` =
//! `CPU_PINNED` / `DISK`, one `BlockStored` per page chained by `parent_block_hash` as
//! SGLang's `KvEventRecorder.record_store` does. A prefix held only in a worker's host tier
//! routes there rather than to a worker holding nothing, a GPU holder still beats a host
//! holder, removals and clears of a tier reach that tier, and `--kv-tier-credit off` leaves
//! the tiers unindexed. Before tiers existed the router dropped every non-GPU event (the first
//! test fails on that code: its `/debug/index` has no `tiers` and the host blocks never show).
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

use crate::support;

use rmpv::Value as V;
use serde_json::Value;
use support::fake_publisher::FakePublisher;
use support::fake_worker::{port_of, server_info_0_5_23, wildcard_publisher, FakeWorker};
use support::http::client;
use support::kv::{blocks_of, debug_index, kv_router_paged, prompt, routed, wait_sources};
use support::sglang_wire::batch;
use support::wait::Deadline;

/// SGLang's page in `server_info_0_5_23`.
const PAGE: usize = 16;

/// A worker behind a fake `/server_info` and its event publisher.
struct Worker {
    http: FakeWorker,
    publisher: FakePublisher,
    seq: u64,
}

impl Worker {
    async fn start() -> Worker {
        let publisher = FakePublisher::bind("").await;
        let (config, block) = wildcard_publisher(
            port_of(&publisher.endpoint),
            port_of(&publisher.replay_endpoint),
        );
        let http = FakeWorker::start(server_info_0_5_23(&config, block, 0)).await;
        Worker {
            http,
            publisher,
            seq: 0,
        }
    }

    fn url(&self) -> &str {
        &self.http.url
    }

    /// Publishes `events` as the next batch and re-sends it until `/debug/index` satisfies
    /// `done` (ZMQ slow joiner: repeats of a batch already applied are stale and skipped).
    async fn publish_until(
        &mut self,
        router: &str,
        events: Vec<V>,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) {
        let payload = batch(events);
        let seq = self.seq;
        self.seq += 1;
        self.publisher.lose(seq, payload.clone());
        let c = support::http::client();
        let deadline = Deadline::after(std::time::Duration::from_secs(30));
        loop {
            self.publisher.republish(seq, payload.clone()).await;
            let index = debug_index(&c, router).await;
            if done(&index) {
                return;
            }
            deadline.check(&format!("{what}; last /debug/index: {index}"));
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

/// A tagged-map event (`{"type": tag, field: value, ...}`, SGLang 0.5.23's msgspec shape).
fn tagged(tag: &str, fields: Vec<(&str, V)>) -> V {
    let mut pairs = vec![(V::from("type"), V::from(tag))];
    pairs.extend(fields.into_iter().map(|(k, v)| (V::from(k), v)));
    V::Map(pairs)
}

/// SGLang's `record_store` of `tokens` (whole pages) in `medium`: one `BlockStored` per page,
/// engine hashes `first_hash + i`, each page's parent the one before.
fn store_chain(tokens: &[u32], first_hash: i64, medium: &str) -> Vec<V> {
    let mut parent = V::Nil;
    tokens
        .chunks_exact(PAGE)
        .enumerate()
        .map(|(i, page)| {
            let hash = first_hash + i as i64;
            let event = tagged(
                "BlockStored",
                vec![
                    ("block_hashes", V::Array(vec![V::from(hash)])),
                    ("parent_block_hash", parent.clone()),
                    (
                        "token_ids",
                        V::Array(page.iter().map(|t| V::from(*t)).collect()),
                    ),
                    ("block_size", V::from(PAGE as u64)),
                    ("medium", V::from(medium)),
                ],
            );
            parent = V::from(hash);
            event
        })
        .collect()
}

/// SGLang's `record_remove` of pages `first_hash ..+ pages` in `medium` (one event per node).
fn remove_chain(first_hash: i64, pages: usize, medium: &str) -> V {
    let hashes = (0..pages as i64).map(|i| V::from(first_hash + i)).collect();
    tagged(
        "BlockRemoved",
        vec![
            ("block_hashes", V::Array(hashes)),
            ("medium", V::from(medium)),
        ],
    )
}

fn cleared() -> V {
    tagged("AllBlocksCleared", vec![])
}

/// A KV-mode router (page 16) over `workers`.
fn router(workers: &[&str], extra: &[&str]) -> support::Proc {
    kv_router_paged("16", workers, extra)
}

/// `worker`'s blocks in `tier` (`host_blocks` / `disk_blocks`) per `/debug/index`'s `tiers`.
fn tier_blocks(index: &Value, worker: &str, tier: &str) -> Option<u64> {
    index["tiers"]["units"]
        .as_array()?
        .iter()
        .filter(|u| u["worker"] == worker)
        .map(|u| u[format!("{tier}_blocks")].as_u64())
        .sum()
}

/// Four full pages plus one token (SGLang matches all but the last token).
fn request(seed: u32) -> Vec<u32> {
    prompt(seed, 4 * PAGE + 1)
}

#[tokio::test]
async fn a_prefix_in_the_host_tier_only_beats_no_prefix() {
    let mut a = Worker::start().await;
    let b = Worker::start().await;
    let r = router(&[a.url(), b.url()], &[]);
    wait_sources(&client(), &r.url, 2).await;
    // A holds four prompts' prefixes in host memory only (evicted from its GPU); B nothing.
    let seeds = [11, 12, 13, 14];
    let mut events = vec![cleared()];
    for (i, s) in seeds.iter().enumerate() {
        let ids = request(*s);
        events.extend(store_chain(
            &ids[..4 * PAGE],
            1000 * (i as i64 + 1),
            "CPU_PINNED",
        ));
    }
    let url = a.url().to_string();
    a.publish_until(&r.url, events, "A's host-tier blocks indexed", |v| {
        tier_blocks(v, &url, "host") == Some(16)
    })
    .await;
    let c = support::http::client();
    let index = debug_index(&c, &r.url).await;
    assert_eq!(blocks_of(&index, &url), 0, "nothing of A on the GPU tier");
    assert_eq!(index["tiers"]["resident_blocks"]["host"], 16);
    assert_eq!(index["tiers"]["credit"]["host"], 0.75);
    for s in seeds {
        assert_eq!(routed(&r.url, &request(s)).await, url, "prompt {s}");
    }
    let metrics = support::http::get_text(&c, &format!("{}/metrics", r.url)).await;
    assert!(
        metrics.contains("kvrouter_kv_tier_blocks{tier=\"host\"}"),
        "tier gauge on /metrics"
    );
}

#[tokio::test]
async fn a_gpu_holder_beats_a_host_holder() {
    let mut a = Worker::start().await;
    let mut b = Worker::start().await;
    let r = router(&[a.url(), b.url()], &[]);
    wait_sources(&client(), &r.url, 2).await;
    let ids = request(21);
    let (ua, ub) = (a.url().to_string(), b.url().to_string());
    let host = store_chain(&ids[..4 * PAGE], 500, "CPU_PINNED");
    a.publish_until(&r.url, host, "A's host-tier blocks", |v| {
        tier_blocks(v, &ua, "host") == Some(4)
    })
    .await;
    let gpu = store_chain(&ids[..4 * PAGE], 500, "GPU");
    b.publish_until(&r.url, gpu, "B's GPU blocks", |v| blocks_of(v, &ub) == 4)
        .await;
    assert_eq!(routed(&r.url, &ids).await, ub);
}

#[tokio::test]
async fn disk_tier_is_credited_and_its_removals_and_clears_reach_it() {
    let mut a = Worker::start().await;
    let b = Worker::start().await;
    let r = router(&[a.url(), b.url()], &[]);
    wait_sources(&client(), &r.url, 2).await;
    let ids = request(31);
    let ua = a.url().to_string();
    let disk = store_chain(&ids[..4 * PAGE], 700, "DISK");
    a.publish_until(&r.url, disk, "A's disk-tier blocks", |v| {
        tier_blocks(v, &ua, "disk") == Some(4)
    })
    .await;
    assert_eq!(routed(&r.url, &ids).await, ua);
    // The disk tier drops two pages (leaf first); the host tier gains the whole prefix.
    let mut events = vec![remove_chain(702, 2, "DISK")];
    events.extend(store_chain(&ids[..4 * PAGE], 700, "CPU_PINNED"));
    a.publish_until(&r.url, events, "A's disk removal and host store", |v| {
        tier_blocks(v, &ua, "disk") == Some(2) && tier_blocks(v, &ua, "host") == Some(4)
    })
    .await;
    // A host removal does not touch the disk tier; a cache reset clears every tier.
    a.publish_until(
        &r.url,
        vec![remove_chain(703, 1, "CPU_PINNED")],
        "A's host removal",
        |v| tier_blocks(v, &ua, "host") == Some(3) && tier_blocks(v, &ua, "disk") == Some(2),
    )
    .await;
    a.publish_until(&r.url, vec![cleared()], "A's cache reset", |v| {
        tier_blocks(v, &ua, "host") == Some(0) && tier_blocks(v, &ua, "disk") == Some(0)
    })
    .await;
}

#[tokio::test]
async fn credit_off_leaves_the_tiers_unindexed() {
    let mut a = Worker::start().await;
    let r = router(&[a.url()], &["--kv-tier-credit", "off"]);
    wait_sources(&client(), &r.url, 1).await;
    let ua = a.url().to_string();
    // One batch: a host-tier prefix, then a GPU one (the readiness signal).
    let mut events = store_chain(&request(41)[..4 * PAGE], 100, "CPU_PINNED");
    events.extend(store_chain(&request(42)[..2 * PAGE], 200, "GPU"));
    a.publish_until(&r.url, events, "A's GPU blocks", |v| blocks_of(v, &ua) == 2)
        .await;
    let index = debug_index(&support::http::client(), &r.url).await;
    assert_eq!(tier_blocks(&index, &ua, "host"), Some(0), "{index}");
    assert_eq!(index["tiers"]["credit"]["host"], 0.0);
}
