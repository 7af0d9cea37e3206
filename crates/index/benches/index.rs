//! Criterion benches of block hashing and the embedded KV index on the
//! conversation trace (page 16): hashing, event ingest, `find_matches` at 8 /
//! 64 / 512 workers, 64k-token prompts (cold and next turn), and a predict-on-route
//! booking's life on a 32k-token prompt (the pending layer).
//! Percentiles and memory: `benches/index_report.rs`. Peers: `benches/peers`.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

#[path = "common/index_data.rs"]
mod data;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use kvrouter_index::{seq_hashes, BlockHasher, KvEvent, KvIndex, WorkerId};

const REQUESTS: usize = 1000;
const WORKERS: [usize; 3] = [8, 64, 512];

fn stored_event(tokens: &[u32]) -> KvEvent {
    let seqs = seq_hashes(tokens, data::PAGE);
    KvEvent::Stored {
        parent: None,
        block_hashes: seqs.iter().map(|s| data::engine_hash(*s)).collect(),
        token_ids: tokens[..seqs.len() * data::PAGE].to_vec(),
        block_size: data::PAGE as u32,
    }
}

fn events(prompts: &[Vec<u32>], workers: usize) -> Vec<(WorkerId, KvEvent)> {
    prompts
        .iter()
        .enumerate()
        .map(|(i, p)| (WorkerId(data::owner(i, workers)), stored_event(p)))
        .collect()
}

fn blocks_in(events: &[(WorkerId, KvEvent)]) -> u64 {
    events
        .iter()
        .map(|(_, e)| match e {
            KvEvent::Stored { block_hashes, .. } => block_hashes.len() as u64,
            _ => 0,
        })
        .sum()
}

fn hashing(c: &mut Criterion) {
    let mut g = c.benchmark_group("index/hash");
    let long = data::long_prompt(65_536, 1);
    g.throughput(Throughput::Elements(long.len() as u64));
    g.bench_function("seq_hashes_64k", |b| {
        b.iter(|| seq_hashes(black_box(&long), data::PAGE))
    });
    let mut next = long.clone();
    next.extend(data::long_prompt(1024, 2));
    let mut hasher = BlockHasher::from_tokens(data::PAGE, &long);
    g.throughput(Throughput::Elements(1024));
    g.bench_function("next_turn_1k_new_tokens", |b| {
        b.iter(|| hasher.advance_to(black_box(&next), long.len()))
    });
    g.finish();
}

fn ingest(c: &mut Criterion) {
    let prompts = data::trace_prompts(REQUESTS);
    let mut g = c.benchmark_group("index/ingest");
    for w in WORKERS {
        let evs = events(&prompts, w);
        g.throughput(Throughput::Elements(blocks_in(&evs)));
        g.bench_function(format!("kvindex/{w}w"), |b| {
            b.iter_batched(
                || KvIndex::new(data::PAGE as u32),
                |idx| {
                    for (worker, ev) in &evs {
                        let _ = idx.apply(*worker, 0, ev);
                    }
                    idx
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

fn find(c: &mut Criterion) {
    let prompts = data::trace_prompts(REQUESTS);
    let queries: Vec<Vec<u64>> = prompts.iter().map(|p| seq_hashes(p, data::PAGE)).collect();
    let mut g = c.benchmark_group("index/find");
    for w in WORKERS {
        let evs = events(&prompts, w);
        let idx = KvIndex::new(data::PAGE as u32);
        for (worker, ev) in &evs {
            let _ = idx.apply(*worker, 0, ev);
        }
        let mut i = 0;
        g.bench_function(format!("kvindex/{w}w"), |b| {
            b.iter(|| {
                i = (i + 1) % queries.len();
                idx.find_matches(black_box(&queries[i]))
            })
        });
        g.bench_function(format!("kvindex_hash_and_find/{w}w"), |b| {
            b.iter(|| {
                i = (i + 1) % prompts.len();
                idx.find_matches(&seq_hashes(black_box(&prompts[i]), data::PAGE))
            })
        });
    }
    g.finish();
}

fn long_prompts(c: &mut Criterion) {
    let prompts = data::trace_prompts(REQUESTS);
    let idx = Arc::new(KvIndex::new(data::PAGE as u32));
    for (worker, ev) in events(&prompts, 64) {
        let _ = idx.apply(worker, 0, &ev);
    }
    let long = data::long_prompt(65_536, 7);
    let _ = idx.apply(WorkerId(3), 0, &stored_event(&long));
    let mut next = long.clone();
    next.extend(data::long_prompt(1024, 8));
    let mut g = c.benchmark_group("index/long64k");
    g.bench_function("kvindex_cold_hash_and_find", |b| {
        b.iter(|| idx.find_matches(&seq_hashes(black_box(&long), data::PAGE)))
    });
    let seqs = seq_hashes(&long, data::PAGE);
    g.bench_function("kvindex_find_only", |b| {
        b.iter(|| idx.find_matches(black_box(&seqs)))
    });
    let mut hasher = BlockHasher::from_tokens(data::PAGE, &long);
    g.bench_function("kvindex_next_turn_hash_and_find", |b| {
        b.iter(|| {
            hasher.advance_to(black_box(&next), long.len());
            idx.find_matches(hasher.seq_hashes())
        })
    });
    g.finish();
}

/// One booking of a 32k-token prompt (2,048 blocks) on one unit: booked and cancelled (the
/// request failed before prefill) on a warm index, or booked, prefilled (first byte) and
/// confirmed by the unit's store event (`apply` of that event included: what the router does)
/// on an empty one.
fn predictions(c: &mut Criterion) {
    let mut g = c.benchmark_group("index/predict");
    let prompt = data::long_prompt(32_768, 3);
    let seqs = seq_hashes(&prompt, data::PAGE);
    let stored = stored_event(&prompt);
    let ttl = Duration::from_secs(10);
    g.throughput(Throughput::Elements(seqs.len() as u64));
    // On an index already holding 64 other live bookings (the pending map warm, as in a
    // router under load).
    let warm = KvIndex::new(data::PAGE as u32);
    let _live: Vec<_> = (0..64)
        .map(|i| {
            let other = seq_hashes(&data::long_prompt(8_192, 100 + i), data::PAGE);
            warm.book(WorkerId(i as u32 % 8), 0, &other, Duration::from_secs(3600))
                .unwrap()
        })
        .collect();
    g.bench_function("book_cancel_32k", |b| {
        b.iter(|| {
            warm.book(WorkerId(1), 0, black_box(&seqs), ttl)
                .unwrap()
                .cancel()
        })
    });
    g.bench_function("book_prefill_confirm_32k", |b| {
        b.iter_batched(
            || KvIndex::new(data::PAGE as u32),
            |idx| {
                let mut booking = idx.book(WorkerId(1), 0, black_box(&seqs), ttl).unwrap();
                booking.prefill_done();
                idx.apply(WorkerId(1), 0, &stored).unwrap();
                drop(booking);
                idx
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, hashing, ingest, find, long_prompts, predictions);
criterion_main!(benches);
