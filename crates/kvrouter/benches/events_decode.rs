//! Event decoding throughput: SGLang batches (positional, the common shape) and
//! Dynamo RouterEvents (JSON), and a full rank feed (decode + cursor + checks +
//! a no-op sink). Figures in docs/benchmarks.md under "## events".
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kvrouter::events::dynamo_wire::decode_router_event;
use kvrouter::events::sglang_wire::decode_batch;
use kvrouter::events::{KvEventSink, Payload, RankFeed};
use kvrouter::workers::{Rank, WorkerId};
use kvrouter_index::KvEvent;
use rmpv::Value as V;

const PAGE: u32 = 16;
const BLOCKS: usize = 64;

struct NullSink;

impl KvEventSink for NullSink {
    fn apply(&self, _: WorkerId, _: Rank, event: KvEvent) {
        black_box(event);
    }
}

/// One batch with one BlockStored of `BLOCKS` pages of `PAGE` tokens.
fn sglang_batch() -> Vec<u8> {
    let hashes = (0..BLOCKS as i64)
        .map(|h| V::from(h * 7_919 - 1_000_000_007))
        .collect();
    let tokens = (0..BLOCKS as u32 * PAGE)
        .map(|t| V::from(t * 31 % 150_000))
        .collect();
    let stored = V::Array(vec![
        V::from("BlockStored"),
        V::Array(hashes),
        V::from(-42),
        V::Array(tokens),
        V::from(PAGE),
        V::Nil,
        V::from("GPU"),
    ]);
    let mut out = Vec::new();
    rmpv::encode::write_value(
        &mut out,
        &V::Array(vec![V::F64(1.7e9), V::Array(vec![stored]), V::from(0)]),
    )
    .unwrap();
    out
}

fn dynamo_json() -> Vec<u8> {
    let blocks: Vec<_> = (0..BLOCKS as u64)
        .map(|i| serde_json::json!({"block_hash": i * 31 + 5, "tokens_hash": i.wrapping_mul(0x9E37_79B9_7F4A_7C15)}))
        .collect();
    serde_json::to_vec(&serde_json::json!({"worker_id": 1, "event": {"event_id": 1, "data": {"stored": {"parent_hash": 9, "blocks": blocks}}}}))
        .unwrap()
}

fn bench(c: &mut Criterion) {
    let sglang = sglang_batch();
    let dynamo = dynamo_json();
    let mut group = c.benchmark_group("events_decode");
    group.throughput(Throughput::Elements(BLOCKS as u64));
    group.bench_function("sglang_batch_64x16", |b| {
        b.iter(|| decode_batch(black_box(&sglang)).unwrap())
    });
    group.bench_function("dynamo_json_64", |b| {
        b.iter(|| decode_router_event(black_box(&dynamo)).unwrap())
    });
    let mut feed = RankFeed::new(
        WorkerId(0),
        0,
        Arc::from("bench"),
        PAGE,
        0,
        Arc::new(NullSink),
    );
    let mut seq = 0u64;
    group.bench_function("sglang_feed_64x16", |b| {
        b.iter(|| {
            seq += 1;
            feed.offer(seq, Payload::Sglang(black_box(&sglang)), false)
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
