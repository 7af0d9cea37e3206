//! `GET /debug/index` (admin key): per-worker, per-rank resident block counts and digests (XOR of the
//! resident sequence hashes), and a global digest
//! that is identical on two routers holding the same index (keyed by worker URL, not by the
//! router-local worker id), so tests and operators can compare replicas; plus each unit's
//! learned rates and speed factors (`unit_rates`), each unit's eviction rate
//! (`unit_pressure`) and the observed reuse the cost model charges displaced blocks at
//! (`observed_reuse`, `pressure.rs`); none of these is part of the digest.

use serde_json::{json, Value};
use xxhash_rust::xxh3::xxh3_64;

use super::feeds::KvRuntime;
use crate::workers::Registry;

/// The JSON view (see module docs).
pub fn index_json(kv: &KvRuntime, registry: &Registry) -> Value {
    let index = &kv.index;
    let mut rows: Vec<(String, u32, usize, u64, f64)> = Vec::new();
    for w in registry.snapshot().iter() {
        for rank in w.ranks() {
            rows.push((
                w.url.clone(),
                rank,
                index.unit_blocks(w.id, rank),
                index.unit_digest(w.id, rank),
                kv.pressure.view(w.id, rank).evictions_per_sec,
            ));
        }
    }
    rows.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    let mut digest_input = String::new();
    for (url, rank, blocks, digest, _) in &rows {
        digest_input.push_str(&format!("{url}#{rank}={blocks}:{digest:016x};"));
    }
    let workers: Vec<Value> = rows
        .iter()
        .map(|(url, rank, blocks, digest, _)| {
            json!({"worker": url, "rank": rank, "blocks": blocks, "digest": format!("{digest:016x}")})
        })
        .collect();
    // Apart from `units`: replicas holding the same index sample it at different times.
    let pressure: Vec<Value> = rows
        .iter()
        .map(|(url, rank, _, _, evictions)| {
            json!({"worker": url, "rank": rank, "evictions_per_sec": evictions})
        })
        .collect();
    let rates: Vec<Value> = kv
        .rates
        .views()
        .into_iter()
        .map(|r| {
            json!({"worker": r.url, "rank": r.rank,
                "prefill_seconds_per_block": r.prefill_seconds_per_block,
                "decode_seconds_per_token": r.decode_seconds_per_token,
                "prefill_factor": r.speed.prefill, "decode_factor": r.speed.decode})
        })
        .collect();
    json!({
        "page_size": index.page_size(),
        "resident_blocks": index.resident_blocks(),
        "distinct_blocks": index.distinct_blocks(),
        "memory_bytes": index.memory_bytes(),
        "zmq_sources": kv.source_count(),
        "units": workers,
        "digest": format!("{:016x}", xxh3_64(digest_input.as_bytes())),
        "unit_rates": rates,
        "unit_pressure": pressure,
        "observed_reuse": kv.pressure.reuse(),
    })
}
