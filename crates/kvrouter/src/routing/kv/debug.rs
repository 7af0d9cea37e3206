//! `GET /debug/index` (admin key): per-worker, per-rank resident block counts and digests (XOR of the
//! resident sequence hashes), and a global digest
//! that is identical on two routers holding the same index (keyed by worker URL, not by the
//! router-local worker id), so tests and operators can compare replicas; plus each unit's
//! learned rates and speed factors (`unit_rates`), each unit's eviction rate
//! (`unit_pressure`) and the observed reuse the cost model charges displaced blocks at
//! (`observed_reuse`, `pressure.rs`); and the lower cache tiers (`tiers`: their credits, resident
//! blocks per tier, each unit's host and disk blocks; `tiers.rs`); and how each unit's
//! predictions turned out (`predictions`: blocks booked, confirmed, removed, expired, cancelled,
//! the recent confirm ratio and delay, the learned TTL; the index's `calibration.rs`). None of
//! these is part of the digest.

use kvrouter_index::Tier;
use serde_json::{json, Value};
use xxhash_rust::xxh3::xxh3_64;

use super::KvRuntime;
use crate::workers::Registry;

/// One unit's row: worker URL, rank, resident blocks, digest, evictions per second.
type UnitRow = (String, u32, usize, u64, f64);

/// The JSON view (see module docs).
pub fn index_json(kv: &KvRuntime, registry: &Registry) -> Value {
    let index = &kv.index;
    let rows = unit_rows(kv, registry);
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
    let rates = rates_json(kv);
    let tiers_json = tiers_json(kv, registry);
    let predictions = predictions_json(kv, registry, &rows);
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
        "tiers": tiers_json,
        "predictions": predictions,
    })
}

/// Every unit of the fleet, sorted by (URL, rank).
fn unit_rows(kv: &KvRuntime, registry: &Registry) -> Vec<UnitRow> {
    let index = &kv.index;
    let mut rows: Vec<UnitRow> = Vec::new();
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
    rows
}

/// `unit_rates`: each unit's learned rates and speed factors.
fn rates_json(kv: &KvRuntime) -> Vec<Value> {
    kv.rates
        .views()
        .into_iter()
        .map(|r| {
            json!({"worker": r.url, "rank": r.rank,
                "prefill_seconds_per_block": r.prefill_seconds_per_block,
                "decode_seconds_per_token": r.decode_seconds_per_token,
                "prefill_factor": r.speed.prefill, "decode_factor": r.speed.decode})
        })
        .collect()
}

/// `tiers`: credits, resident blocks per tier, each unit's host and disk blocks.
fn tiers_json(kv: &KvRuntime, registry: &Registry) -> Value {
    let tiers = &kv.tiers;
    let mut tier_rows: Vec<(String, u32, usize, usize)> = Vec::new();
    for w in registry.snapshot().iter() {
        for rank in w.ranks() {
            tier_rows.push((
                w.url.clone(),
                rank,
                tiers.unit_blocks(Tier::Host, w.id, rank),
                tiers.unit_blocks(Tier::Disk, w.id, rank),
            ));
        }
    }
    tier_rows.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    let tier_units: Vec<Value> = tier_rows
        .iter()
        .map(|(url, rank, host, disk)| {
            json!({"worker": url, "rank": rank, "host_blocks": host, "disk_blocks": disk})
        })
        .collect();
    let credits = tiers.credits();
    json!({
        "credit": {"host": credits.host, "disk": credits.disk},
        "resident_blocks": {"gpu": kv.index.resident_blocks(),
            "host": tiers.resident_blocks(Tier::Host), "disk": tiers.resident_blocks(Tier::Disk)},
        "memory_bytes": tiers.memory_bytes(),
        "units": tier_units,
    })
}

/// `predictions`: how each unit's predicted blocks turned out.
fn predictions_json(kv: &KvRuntime, registry: &Registry, rows: &[UnitRow]) -> Vec<Value> {
    let now = tokio::time::Instant::now().into_std();
    rows.iter()
        .filter_map(|(url, rank, ..)| {
            let w = registry.by_url(url)?;
            let c = kv.index.prediction_calibration(w.id, *rank, now);
            Some(
                json!({"worker": url, "rank": rank, "booked_blocks": c.booked,
                "confirmed": c.confirmed, "removed": c.removed, "expired": c.expired,
                "cancelled": c.cancelled, "confirm_ratio": c.confirm_ratio,
                "confirm_secs_mean": c.confirm_secs,
                "learned_ttl_secs": c.learned_ttl.map(|t| t.as_secs_f64())}),
            )
        })
        .collect()
}
