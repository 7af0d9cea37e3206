//! Cost of tokenizing text chat requests for routing (`kvrouter::text`): a 1k, 8k and 32k-token
//! agent conversation rendered with the ChatML template and tokenized with a byte-level BPE
//! tokenizer (`text::fixture`), whole (first turn, or cache off) and as the next turn of a
//! cached session (only the new messages are tokenized).
//!
//! `cargo bench -p kvrouter --bench tokenize` prints p50/p99 per case first (200 timed runs),
//! then runs the criterion groups. `TOKENIZE_REPORT_ONLY=1` skips criterion.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use kvrouter::text::{fixture, TextTokenizer};
use serde_json::{json, Value};

fn tokenizer(cache_bytes: usize) -> TextTokenizer {
    let dir = std::env::temp_dir().join(format!("kvrouter-bench-tokenizer-{}", std::process::id()));
    fixture::write_model_dir(&dir, &fixture::bpe_json(&fixture::WORDS), fixture::CHATML)
        .unwrap_or_else(|e| panic!("fixture: {e}"));
    TextTokenizer::load(&dir, cache_bytes).unwrap_or_else(|e| panic!("load: {e}"))
}

/// Text of about `tokens` tokens of the fixture BPE: one word (with its leading space) per
/// token, a line break every 12 words.
fn text(seed: usize, tokens: usize) -> String {
    let mut out = String::new();
    for i in 0..tokens {
        let w = fixture::WORDS[(seed * 7 + i * 13) % fixture::WORDS.len()];
        out.push_str(w);
        out.push_str(if i % 12 == 11 { ".\n" } else { " " });
    }
    out
}

/// A conversation of about `tokens` tokens (system prompt, then six turns), and the same one
/// with one more assistant + user turn (about 10% more).
fn conversation(tokens: usize) -> (Vec<u8>, Vec<u8>) {
    let body = tokens * 3 / 4 / 6;
    let mut messages: Vec<Value> = vec![json!({"role": "system", "content": text(0, tokens / 5)})];
    for i in 1..=6 {
        let role = if i % 2 == 1 { "user" } else { "assistant" };
        messages.push(json!({"role": role, "content": text(i, body)}));
    }
    let first = serde_json::to_vec(&json!({"messages": messages})).unwrap_or_default();
    messages.push(json!({"role": "assistant", "content": text(7, tokens / 20)}));
    messages.push(json!({"role": "user", "content": text(8, tokens / 20)}));
    let next = serde_json::to_vec(&json!({"messages": messages})).unwrap_or_default();
    (first, next)
}

/// [`conversation`] rescaled once so that its first turn has about `target` tokens.
fn calibrated(t: &TextTokenizer, target: usize) -> (Vec<u8>, Vec<u8>) {
    let (first, _) = conversation(target);
    let n = t
        .encode_chat_uncached(&first)
        .map(|v| v.len())
        .unwrap_or(target)
        .max(1);
    conversation(target * target / n)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn report() {
    let whole = tokenizer(0);
    let cached = tokenizer(1 << 30);
    println!("| chat | prompt tokens (next turn) | whole p50 | whole p99 | next turn (cached) p50 | p99 |");
    println!("|---|---|---|---|---|---|");
    for size in [1_000, 8_000, 32_000] {
        let (first, next) = calibrated(&whole, size);
        let n = whole.encode_chat(&next).map(|v| v.len()).unwrap_or(0);
        let mut w = Vec::new();
        let mut c = Vec::new();
        for _ in 0..200 {
            let t0 = Instant::now();
            black_box(whole.encode_chat(&next).ok());
            w.push(t0.elapsed());
            cached.clear_cache();
            cached.encode_chat(&first).ok(); // the previous turn, as the agent sent it
            let t0 = Instant::now();
            black_box(cached.encode_chat(&next).ok());
            c.push(t0.elapsed());
        }
        w.sort();
        c.sort();
        println!(
            "| {}k | {n} | {:.2?} | {:.2?} | {:.2?} | {:.2?} |",
            size / 1000,
            percentile(&w, 0.5),
            percentile(&w, 0.99),
            percentile(&c, 0.5),
            percentile(&c, 0.99)
        );
    }
}

fn bench(c: &mut Criterion) {
    let whole = tokenizer(0);
    let cached = tokenizer(1 << 30);
    let mut g = c.benchmark_group("tokenize_chat");
    g.sample_size(20);
    for size in [1_000, 8_000, 32_000] {
        let (first, next) = calibrated(&whole, size);
        g.bench_function(format!("whole_{}k", size / 1000), |b| {
            b.iter(|| black_box(whole.encode_chat(&next).ok()))
        });
        g.bench_function(format!("next_turn_{}k", size / 1000), |b| {
            b.iter_batched(
                || {
                    cached.clear_cache();
                    cached.encode_chat(&first).ok();
                },
                |_| black_box(cached.encode_chat(&next).ok()),
                criterion::BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench);

fn main() {
    report();
    if std::env::var_os("TOKENIZE_REPORT_ONLY").is_none() {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
}
