//! The workers and the one decision the routing benches run, shared by the criterion bench
//! (`routing_path.rs`, wall time) and the instruction counter (`fleet_instructions.rs`, run
//! under callgrind); and the fleet the `kv_fleet_*` cases decide over: `n` workers each
//! holding 64 blocks of its own, `n / 2` requests in flight and the prompt's first half cached
//! on worker 3.

use std::sync::Arc;
use std::time::Duration;

use kvrouter::config::KvConfig;
use kvrouter::routing::kv::{KvPolicy, KvPolicySettings, UnitLoads};
use kvrouter::routing::{Booking, Endpoint, RoutingInput, Selector, StickyTable};
use kvrouter::workers::{Worker, WorkerId, WorkerInfo};
use kvrouter_index::{KvEvent, KvIndex};

/// The decided prompt (128 tokens) and its `/generate` body.
pub fn prompt() -> (Vec<u32>, Vec<u8>) {
    let prompt: Vec<u32> = (0..128u32).map(|i| (i * 7919) % 151_000).collect();
    let body = serde_json::to_vec(&serde_json::json!({ "input_ids": prompt })).unwrap();
    (prompt, body)
}

/// `n` workers of page size 16.
pub fn fleet_workers(n: u32) -> Vec<Arc<Worker>> {
    workers_holding(n, None)
}

/// `n` workers of page size 16 advertising `max_total_num_tokens` of KV each.
pub fn workers_holding(n: u32, max_total_num_tokens: Option<u64>) -> Vec<Arc<Worker>> {
    (0..n)
        .map(|i| {
            let info = WorkerInfo {
                page_size: 16,
                max_total_num_tokens,
                ..WorkerInfo::default()
            };
            Arc::new(Worker::new(
                WorkerId(i),
                &format!("http://127.0.0.1:{}", 30000 + i),
                info,
            ))
        })
        .collect()
}

/// Parses a `/generate` body, selects a worker among `candidates` and releases the booking.
pub fn decide(selector: &Selector, body: &[u8], candidates: &[Arc<Worker>]) {
    let input = RoutingInput::parse(Endpoint::Generate, body).expect("valid");
    drop(selector.select(&input, None, candidates).expect("a worker"));
}

/// A KV selector over `n` workers, each holding 64 blocks of its own, with `n / 2` requests in
/// flight (held in the returned bookings) and the prompt's first half cached on worker 3.
pub fn fleet_selector(
    candidates: &[Arc<Worker>],
    prompt: &[u32],
    every_unit: bool,
) -> (Selector, Vec<Booking>) {
    let index = Arc::new(KvIndex::new(16));
    for w in candidates {
        let ids: Vec<u32> = (0..64 * 16).map(|i| 200_000 + w.id.0 * 2_000 + i).collect();
        let event = KvEvent::Stored {
            parent: None,
            block_hashes: (0..64).map(|i| (u64::from(w.id.0) << 20) + i).collect(),
            token_ids: ids,
            block_size: 16,
        };
        index.apply(w.id, 0, &event).unwrap();
    }
    let cached = KvEvent::Stored {
        parent: None,
        block_hashes: (0..4).map(|i| (1 << 40) + i).collect(),
        token_ids: prompt[..64].to_vec(),
        block_size: 16,
    };
    index.apply(candidates[3].id, 0, &cached).unwrap();
    let settings = KvPolicySettings::from_config(&KvConfig::default());
    let mut policy = KvPolicy::new(index, Arc::new(UnitLoads::default()), settings);
    if every_unit {
        policy = policy.reading_every_unit();
    }
    let selector = Selector::new(Box::new(policy), StickyTable::new(Duration::from_secs(60)));
    let held = (0..candidates.len() / 2)
        .map(|i| {
            let ids: Vec<u32> = (0..256).map(|t| 900_000 + i as u32 * 300 + t).collect();
            let body = serde_json::to_vec(&serde_json::json!({ "input_ids": ids })).unwrap();
            let input = RoutingInput::parse(Endpoint::Generate, &body).expect("valid");
            selector.select(&input, None, candidates).expect("a worker")
        })
        .collect();
    (selector, held)
}
