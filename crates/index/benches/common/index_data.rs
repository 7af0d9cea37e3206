//! Bench data for the KV index: the Mooncake conversation trace turned into
//! token prompts (each `hash_id` = 512 deterministic tokens, prompts cut to
//! `input_length`), SGLang-like events (opaque engine hashes, page 16) and a
//! synthetic 64k-token prompt. Shared by `benches/index*.rs` and the peer
//! package (`benches/peers`, included by path).

#![allow(dead_code)]

use std::path::PathBuf;

pub const PAGE: usize = 16;
pub const TRACE_BLOCK: usize = 512;

fn trace_path() -> PathBuf {
    if let Ok(p) = std::env::var("KVROUTER_TRACE") {
        return p.into();
    }
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let candidates = [
        here.join("../shared/traces/conversation_trace.jsonl"),
        here.join("../../../shared/traces/conversation_trace.jsonl"),
        PathBuf::from("/work/shared/traces/conversation_trace.jsonl"),
    ];
    candidates
        .iter()
        .find(|p| p.exists())
        .cloned()
        .expect("conversation_trace.jsonl not found; set KVROUTER_TRACE")
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The 512 tokens standing for one trace `hash_id`.
pub fn block_tokens(hash_id: u64, out: &mut Vec<u32>) {
    out.extend((0..TRACE_BLOCK as u64).map(|i| (splitmix(hash_id * 1024 + i) % 151_000) as u32));
}

/// Token prompts of the first `limit` trace requests.
pub fn trace_prompts(limit: usize) -> Vec<Vec<u32>> {
    let text = std::fs::read_to_string(trace_path()).expect("read trace");
    text.lines()
        .take(limit)
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("trace line is JSON");
            let len = v["input_length"].as_u64().unwrap_or(0) as usize;
            let mut toks = Vec::with_capacity(len + TRACE_BLOCK);
            for h in v["hash_ids"].as_array().into_iter().flatten() {
                block_tokens(h.as_u64().unwrap_or(0), &mut toks);
            }
            toks.truncate(len);
            toks
        })
        .collect()
}

/// A long prompt of `n` tokens that shares nothing with the trace.
pub fn long_prompt(n: usize, salt: u64) -> Vec<u32> {
    (0..n as u64)
        .map(|i| (splitmix(salt << 40 | i) % 151_000) as u32)
        .collect()
}

/// SGLang-like opaque engine hash for a block with router sequence hash `seq`.
pub fn engine_hash(seq: u64) -> u64 {
    splitmix(seq ^ 0x5EED)
}

/// Per-page content hashes (xxh3 seed 1337, the same function every index uses).
pub fn content_hashes(tokens: &[u32]) -> Vec<u64> {
    tokens
        .chunks_exact(PAGE)
        .map(kvrouter_index::local_hash)
        .collect()
}

/// Worker `i % workers` holds request `i` (full prompt, one event).
pub fn owner(i: usize, workers: usize) -> u32 {
    (i % workers) as u32
}

/// CPU seconds this process has used, all threads, exited ones included (some peers ingest
/// on background threads). The bench machine is shared, so throughput is reported per CPU
/// second next to wall-clock figures. `CLOCK_PROCESS_CPUTIME_ID`: the kernel adds each running
/// thread's time since its last accounting, so a 16 ms ingest round reads as 16.x ms (the
/// per-thread `/proc/self/task/*/schedstat` used before advanced at the scheduler tick, 4 ms
/// here, and put one round at 16 or 20 ms).
pub fn cpu_secs() -> f64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// Whether a report section should run: all of them unless `KVROUTER_BENCH_ONLY`
/// lists names (comma-separated).
pub fn section(name: &str) -> bool {
    std::env::var("KVROUTER_BENCH_ONLY").map_or(true, |v| v.split(',').any(|s| s == name))
}
