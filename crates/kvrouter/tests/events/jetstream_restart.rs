//! `/readiness` waits for the rebuild (a small stream, always run), and a figure (ignored
//! by default; numbers in docs/events.md): router restart over a JetStream
//! stream holding `KVR_BENCH_WORKERS` workers x `KVR_BENCH_TOKENS` tokens of cached blocks
//! (page `KVR_BENCH_PAGE`), published straight into the stream as synthetic SGLang batches.
//! Measures the time from the router's process start to `/readiness` 200 with the index
//! rebuilt, and checks that the rebuilt index equals the pre-restart one (`/debug/index`
//! digest). Every worker holds the same prompts; their engine hashes agree across workers,
//! as SGLang's do for the same tokens (docs/reference: 8/8 pages with the same token paths
//! have the same `block_hashes`), unless `KVR_BENCH_HASHES=worker` gives every worker its
//! own (a fleet whose engines all disagree: the index's alias path). Run:
//!
//! ```text
//! cargo build --release -p kvrouter-sim --bin sglang-mock
//! KVR_BENCH_TOKENS=1000000 KVR_BENCH_PAGE=16 cargo test --release -p kvrouter \
//!   --test events jetstream_restart -- --ignored --nocapture
//! ```
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, stream};
use async_nats::HeaderMap;
use rmpv::Value as V;
use support::http::client;
use support::kv::{debug_index, ADMIN};
use support::procs::{self, Proc};
use support::wait::Deadline;

const PREFIX: &str = "kvrouter.kv";
/// Blocks per prompt (one `BlockStored` event, parent None).
const SEQ_BLOCKS: usize = 64;
/// Prompts per published batch.
const SEQS_PER_BATCH: usize = 8;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The subject key of a worker URL: 16 hex digits of xxh3-64 (see `nats_envelope`).
fn worker_key(url: &str) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(url.as_bytes()))
}

/// The token ids of the prompt whose first block is `base`: pseudo-random per position, so no
/// two prompts share a page (an engine's radix tree holds a token path once; ids cycling
/// through the vocabulary made every prompt a copy of the one 15,000 blocks before it).
fn prompt_tokens(base: u64, page: usize) -> Vec<u32> {
    (0..SEQ_BLOCKS * page)
        .map(|t| {
            let pos = (base as usize * page + t) as u64;
            1 + (xxhash_rust::xxh3::xxh3_64(&pos.to_le_bytes()) % 30_000) as u32
        })
        .collect()
}

/// Whether every worker names its blocks its own way (`KVR_BENCH_HASHES=worker`).
fn hashes_per_worker() -> bool {
    std::env::var("KVR_BENCH_HASHES").is_ok_and(|v| v == "worker")
}

/// One synthetic SGLang batch: `SEQS_PER_BATCH` prompts of `SEQ_BLOCKS` fresh blocks, whose
/// engine hashes are seeded by `namer` (the same for workers whose engines agree).
fn batch(namer: u64, first_block: u64, page: usize) -> Vec<u8> {
    let events = (0..SEQS_PER_BATCH)
        .map(|s| {
            let base = first_block + (s * SEQ_BLOCKS) as u64;
            let hashes = (0..SEQ_BLOCKS as u64)
                .map(|b| {
                    let key = [namer.to_le_bytes(), (base + b).to_le_bytes()].concat();
                    V::from(xxhash_rust::xxh3::xxh3_64(&key))
                })
                .collect();
            let tokens = prompt_tokens(base, page).into_iter().map(V::from).collect();
            V::Array(vec![
                V::from("BlockStored"),
                V::Array(hashes),
                V::Nil,
                V::Array(tokens),
                V::from(page as u32),
                V::Nil,
            ])
        })
        .collect();
    let mut out = Vec::new();
    rmpv::encode::write_value(
        &mut out,
        &V::Array(vec![V::F64(0.0), V::Array(events), V::from(0)]),
    )
    .unwrap();
    out
}

fn router(nats: &str, page: usize, workers: &[Proc]) -> Proc {
    let page = page.to_string();
    let mut args = vec![
        "--mode",
        "kv",
        "--page-size",
        &page,
        "--admin-api-key",
        ADMIN,
        "--nats-url",
        nats,
        "--nats-jetstream",
        "--health-check-interval-secs",
        "0.5",
    ];
    for w in workers {
        args.extend(["--worker-urls", w.url.as_str()]);
    }
    procs::router(&args)
}

/// CPU seconds (user + system) a process used so far (Linux `/proc/<pid>/stat`; 0 elsewhere).
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// Spawns a router and returns it with the seconds from spawn to `/readiness` 200.
async fn ready_router(nats: &str, page: usize, workers: &[Proc]) -> (Proc, f64) {
    let start = Instant::now();
    let r = router(nats, page, workers);
    let c = client();
    let deadline = Deadline::after(Duration::from_secs(300));
    while c
        .get(format!("{}/readiness", r.url))
        .send()
        .await
        .map(|x| x.status() != 200)
        .unwrap_or(true)
    {
        deadline.check("router ready");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (r, start.elapsed().as_secs_f64())
}

/// Starts `n` mocks (page `page`, room for their blocks) and fills the stream with `tokens`
/// tokens of fresh blocks per worker; returns the mocks and the (block, worker) entries.
async fn filled(
    nats: &support::nats::NatsServer,
    n: usize,
    tokens: usize,
    page: usize,
) -> (Vec<Proc>, usize) {
    let blocks = tokens / page;
    let per_batch = SEQ_BLOCKS * SEQS_PER_BATCH;
    let batches = blocks.div_ceil(per_batch);
    let capacity = (batches * per_batch * page * 2).to_string();
    let page_s = page.to_string();
    let workers: Vec<Proc> = (0..n)
        .map(|_| {
            procs::mock(&[
                "--page-size",
                &page_s,
                "--max-total-tokens",
                &capacity,
                "--speedup",
                "0",
            ])
        })
        .collect();
    // The router creates the stream on first start; create it here the same way.
    let js = jetstream::new(nats.client().await);
    js.get_or_create_stream(stream::Config {
        name: "KVROUTER_KV".into(),
        subjects: vec![format!("{PREFIX}.>")],
        max_age: Duration::from_secs(3600),
        // No byte limit: a limit is reserved from the server's JetStream storage up front, and
        // nats-server grants at most 75% of the free disk (a fixed 8 GiB failed CI with
        // "insufficient storage resources available"); the data here is bounded by its sizes.
        max_bytes: -1,
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .unwrap();
    let t = Instant::now();
    let mut bytes = 0usize;
    let per_worker = hashes_per_worker();
    for (wi, w) in workers.iter().enumerate() {
        let namer = if per_worker { wi as u64 } else { 0 };
        let subject = format!("{PREFIX}.{}.0", worker_key(&w.url));
        let mut acks = Vec::new();
        for b in 0..batches {
            let payload = batch(namer, (b * per_batch) as u64, page);
            bytes += payload.len();
            let mut h = HeaderMap::new();
            h.insert("Kvr-Format", "sglang-msgpack");
            h.insert("Kvr-Worker-Url", w.url.as_str());
            h.insert("Kvr-Rank", "0");
            h.insert("Kvr-Seq", b.to_string());
            acks.push(
                js.publish_with_headers(subject.clone(), h, payload.into())
                    .await
                    .unwrap(),
            );
            if acks.len() >= 256 {
                for a in acks.drain(..) {
                    a.await.unwrap();
                }
            }
        }
        for a in acks {
            a.await.unwrap();
        }
    }
    let entries = n * batches * per_batch;
    println!(
        "stream filled: {n} workers x {} blocks (page {page}) = {entries} entries, {} batches, {:.1} MB, {:.2} s",
        batches * per_batch,
        n * batches,
        bytes as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    (workers, entries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_waits_until_the_index_is_rebuilt() {
    let nats = support::nats::NatsServer::start().await;
    let (workers, entries) = filled(&nats, 2, 400_000, 4).await;
    let (r, _) = ready_router(&nats.url, 4, &workers).await;
    // At the first 200 every entry is already there (the feeds take far longer than the
    // workers' registration, so a readiness that did not wait would answer earlier).
    let index = debug_index(&client(), &r.url).await;
    assert_eq!(index["resident_blocks"].as_u64(), Some(entries as u64));
    // The shared block map too (a replaying feed fills it in bulk, completed before ready):
    // every worker stored the same prompts, so the distinct blocks are one worker's.
    let per_worker = entries / workers.len();
    let distinct: std::collections::HashSet<u64> = (0..per_worker / SEQ_BLOCKS)
        .flat_map(|p| kvrouter_index::seq_hashes(&prompt_tokens((p * SEQ_BLOCKS) as u64, 4), 4))
        .collect();
    assert_eq!(
        index["distinct_blocks"].as_u64(),
        Some(distinct.len() as u64)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "figure: run with --ignored --nocapture (release build), see docs/events.md"]
async fn router_restart_rebuilds_from_jetstream() {
    let n_workers = env("KVR_BENCH_WORKERS", 8);
    let tokens = env("KVR_BENCH_TOKENS", 1_000_000);
    let page = env("KVR_BENCH_PAGE", 16);
    let nats = support::nats::NatsServer::start().await;
    let (workers, entries) = filled(&nats, n_workers, tokens, page).await;

    let c = client();
    let (first, first_s) = ready_router(&nats.url, page, &workers).await;
    let first_cpu = cpu_seconds(first.pid());
    let before = debug_index(&c, &first.url).await;
    drop(first);
    let (second, second_s) = ready_router(&nats.url, page, &workers).await;
    let second_cpu = cpu_seconds(second.pid());
    let after = debug_index(&c, &second.url).await;
    println!(
        "ready after start: first {first_s:.2} s ({first_cpu:.2} CPU s), restart {second_s:.2} s ({second_cpu:.2} CPU s); \
         resident {} / {}; index {} MB; digest {} / {}",
        before["resident_blocks"],
        after["resident_blocks"],
        after["memory_bytes"].as_u64().unwrap_or(0) / 1_000_000,
        before["digest"],
        after["digest"]
    );
    assert_eq!(before["resident_blocks"].as_u64(), Some(entries as u64));
    assert_eq!(before["digest"], after["digest"]);
    assert_eq!(before["resident_blocks"], after["resident_blocks"]);
}
