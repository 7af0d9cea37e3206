//! `GET /debug/index` (admin key): per-worker, per-rank resident block counts and digests (XOR of the
//! resident sequence hashes), and a global digest
//! that is identical on two routers holding the same index (keyed by worker URL, not by the
//! router-local worker id), so tests and operators can compare replicas; plus each unit's
//! learned rates and speed factors (`unit_rates`, not part of the digest).

use serde_json::{json, Value};
use xxhash_rust::xxh3::xxh3_64;

use super::feeds::KvRuntime;
use crate::workers::Registry;

/// The JSON view (see module docs).
pub fn index_json(kv: &KvRuntime, registry: &Registry) -> Value {
    let index = &kv.index;
    let mut rows: Vec<(String, u32, usize, u64)> = Vec::new();
    for w in registry.snapshot().iter() {
        for rank in w.ranks() {
            rows.push((
                w.url.clone(),
                rank,
                index.unit_blocks(w.id, rank),
                index.unit_digest(w.id, rank),
            ));
        }
    }
    rows.sort();
    let mut digest_input = String::new();
    for (url, rank, blocks, digest) in &rows {
        digest_input.push_str(&format!("{url}#{rank}={blocks}:{digest:016x};"));
    }
    let workers: Vec<Value> = rows
        .iter()
        .map(|(url, rank, blocks, digest)| {
            json!({"worker": url, "rank": rank, "blocks": blocks, "digest": format!("{digest:016x}")})
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
    })
}
