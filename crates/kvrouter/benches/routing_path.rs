//! Per-request routing path without network: parse the routing inputs of a body, select a
//! worker among 8 candidates, book it and release the booking. The `parse_ids_*` cases measure
//! what KV mode pays per request: parse plus decoding `input_ids` (16k/64k-token agent contexts,
//! as `/generate` and as a chat body carrying both `messages` and `input_ids`). The `kv_*`
//! cases run the KV policy (hash, match, score 8 units, book) with and without the KV pressure
//! inputs (`routing/kv/pressure.rs`), side by side. The `kv_fleet_*` cases run one KV
//! decision (128-token prompt, booked and released) over fleets of 8 to 1,000 workers with
//! half as many requests in flight as workers and every worker holding other prefixes: the
//! decision's cost as the fleet grows, reading every unit (`full_scan`) and reading the
//! candidate set (`candidates`, the default) side by side.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use std::sync::Arc;
use std::time::Duration;

#[path = "fleet/setup.rs"]
mod fleet;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use kvrouter::config::{KvConfig, Mode};
use kvrouter::routing::kv::{KvPolicy, KvPolicySettings, UnitLoads, UnitPressure, UnitRates};
use kvrouter::routing::{policy_for, Endpoint, RoutingInput, Selector, StickyTable};
use kvrouter::workers::Worker;
use kvrouter_index::{KvEvent, KvIndex};

fn generate_body(tokens: usize) -> Vec<u8> {
    let ids: Vec<u32> = (0..tokens as u32).map(|i| (i * 7919) % 151_000).collect();
    serde_json::to_vec(&serde_json::json!({
        "input_ids": ids,
        "sampling_params": {"temperature": 0.7, "max_new_tokens": 256, "stop_token_ids": [1, 2]},
        "return_logprob": true,
        "rid": "req-0001",
        "stream": false,
        "return_routed_experts": true,
        "custom": {"unknown": ["fields", "are", "skipped"]}
    }))
    .expect("serialisable")
}

fn chat_body() -> Vec<u8> {
    let messages: Vec<_> = (0..8)
        .map(|i| serde_json::json!({"role": if i % 2 == 0 {"user"} else {"assistant"}, "content": "x".repeat(400)}))
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "model": "default", "messages": messages, "logprobs": true, "return_meta_info": true
    }))
    .expect("serialisable")
}

/// A chat body as miles sends it: the conversation (about 4 bytes of text per token) plus its
/// tokenisation, serialised with Python's default `", "` separators.
fn chat_ids_body(tokens: usize) -> Vec<u8> {
    let ids: Vec<u32> = (0..tokens as u32).map(|i| (i * 7919) % 151_000).collect();
    let turns = 8;
    let messages: Vec<_> = (0..turns)
        .map(|i| {
            serde_json::json!({"role": if i % 2 == 0 {"user"} else {"assistant"},
            "content": "lorem ipsum \"quoted\" text\n".repeat(tokens * 4 / turns / 24)})
        })
        .collect();
    let compact = serde_json::to_string(&serde_json::json!({
        "model": "default", "messages": messages, "input_ids": ids,
        "logprobs": true, "return_meta_info": true, "stream": true
    }))
    .expect("serialisable");
    compact.replace(",", ", ").into_bytes()
}

fn bench_large(c: &mut Criterion) {
    let mut g = c.benchmark_group("routing_parse");
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(3));
    for tokens in [16_384usize, 65_536] {
        for (name, endpoint, body) in [
            ("generate", Endpoint::Generate, generate_body(tokens)),
            ("chat", Endpoint::ChatCompletions, chat_ids_body(tokens)),
        ] {
            g.throughput(Throughput::Elements(tokens as u64));
            g.bench_function(format!("parse_ids_{name}_{tokens}_tokens"), |b| {
                b.iter(|| {
                    let input =
                        RoutingInput::parse(endpoint, std::hint::black_box(&body)).expect("valid");
                    input.token_ids().expect("ids").expect("valid ids").len()
                })
            });
        }
    }
    g.finish();
}

fn bench(c: &mut Criterion) {
    let candidates = fleet::fleet_workers(8);
    let mut g = c.benchmark_group("routing_path");
    for tokens in [128usize, 4096] {
        let body = generate_body(tokens);
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_function(format!("parse_generate_{tokens}_tokens"), |b| {
            b.iter(|| {
                RoutingInput::parse(Endpoint::Generate, std::hint::black_box(&body))
                    .map(|r| r.batch_size)
            })
        });
        for mode in [Mode::LeastLoad, Mode::RoundRobin] {
            let selector =
                Selector::new(policy_for(mode), StickyTable::new(Duration::from_secs(60)));
            g.bench_function(format!("parse_select_book_{mode}_{tokens}_tokens"), |b| {
                b.iter(|| fleet::decide(&selector, &body, &candidates))
            });
        }
    }
    let chat = chat_body();
    g.throughput(Throughput::Bytes(chat.len() as u64));
    let selector = Selector::new(
        policy_for(Mode::LeastLoad),
        StickyTable::new(Duration::from_secs(60)),
    );
    g.bench_function("parse_select_book_chat_sticky", |b| {
        let mut n = 0u64;
        b.iter_batched(
            || {
                n += 1;
                format!("session-{}", n % 1000)
            },
            |key| {
                let input = RoutingInput::parse(Endpoint::ChatCompletions, &chat).expect("valid");
                drop(
                    selector
                        .select(&input, Some(&key), &candidates)
                        .expect("a worker"),
                );
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// A KV policy over `candidates` whose index holds the first half of `tokens` on worker 3 and
/// 4,096 other blocks on every worker, half of them since evicted; `pressure` adds the pressure
/// inputs (sampled once).
fn kv_selector(candidates: &[Arc<Worker>], tokens: &[u32], pressure: bool) -> Selector {
    let index = Arc::new(KvIndex::new(16));
    let store = |w: &Worker, base: u64, ids: &[u32]| {
        let n = ids.len() / 16;
        let event = KvEvent::Stored {
            parent: None,
            block_hashes: (0..n as u64).map(|i| base + i).collect(),
            token_ids: ids[..n * 16].to_vec(),
            block_size: 16,
        };
        index.apply(w.id, 0, &event).unwrap();
    };
    for w in candidates {
        let other: Vec<u32> = (0..4096 * 16)
            .map(|i| 200_000 + w.id.0 * 70_000 + i)
            .collect();
        store(w, 1 << 32, &other);
        let evicted = KvEvent::Removed {
            block_hashes: (2048..4096).map(|i| (1 << 32) + i).collect(),
        };
        index.apply(w.id, 0, &evicted).unwrap();
    }
    store(&candidates[3], 1 << 40, &tokens[..tokens.len() / 2]);
    let settings = KvPolicySettings::from_config(&KvConfig::default());
    let rates = Arc::new(UnitRates::new(Default::default()));
    let mut policy =
        KvPolicy::new(index.clone(), Arc::new(UnitLoads::default()), settings).with_rates(rates);
    if pressure {
        let p = Arc::new(UnitPressure::default());
        p.refresh(&index, tokio::time::Instant::now());
        policy = policy.with_pressure(p);
    }
    Selector::new(Box::new(policy), StickyTable::new(Duration::from_secs(60)))
}

fn bench_kv(c: &mut Criterion) {
    let candidates = fleet::workers_holding(8, Some((2048 + 64) * 16)); // 64 pages free
    let mut g = c.benchmark_group("routing_path");
    for tokens in [128usize, 4096] {
        let ids: Vec<u32> = (0..tokens as u32).map(|i| (i * 7919) % 151_000).collect();
        let body = generate_body(tokens);
        for (name, pressure) in [("blocks", false), ("pressure", true)] {
            let selector = kv_selector(&candidates, &ids, pressure);
            g.bench_function(format!("kv_{name}_{tokens}_tokens"), |b| {
                b.iter(|| fleet::decide(&selector, &body, &candidates))
            });
        }
    }
    g.finish();
}

fn bench_fleet(c: &mut Criterion) {
    let mut g = c.benchmark_group("routing_path");
    let (prompt, body) = fleet::prompt();
    for n in [8u32, 64, 512, 1000] {
        let candidates = fleet::fleet_workers(n);
        for (name, every_unit) in [("full_scan", true), ("candidates", false)] {
            let (selector, _held) = fleet::fleet_selector(&candidates, &prompt, every_unit);
            g.bench_function(format!("kv_fleet_{name}_{n}_workers"), |b| {
                b.iter(|| fleet::decide(&selector, &body, &candidates))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench, bench_large, bench_kv, bench_fleet);
criterion_main!(benches);
