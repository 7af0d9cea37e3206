//! Stable-toolchain stand-in for the fuzz targets: feeds seeded random bytes and
//! mutated valid payloads to both event decoders (and through a rank feed with
//! random sequence numbers). Any panic fails the test; errors are expected.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use std::sync::Arc;

use kvrouter::events::dynamo_wire::decode_router_event;
use kvrouter::events::sglang_wire::decode_batch;
use kvrouter::events::{Payload, RankFeed, RecordingSink};
use kvrouter::workers::WorkerId;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rmpv::Value as V;

const ITERATIONS: usize = 20_000;

fn seeds() -> Vec<Vec<u8>> {
    let mut sglang = Vec::new();
    let stored = V::Array(vec![
        V::from("BlockStored"),
        V::Array(vec![V::from(-5), V::from(7)]),
        V::from(3),
        V::Array((0..8).map(V::from).collect()),
        V::from(4),
        V::Nil,
        V::from("GPU"),
    ]);
    let removed = V::Map(vec![
        (V::from("type"), V::from("BlockRemoved")),
        (
            V::from("block_hashes"),
            V::Array(vec![V::Binary(vec![1; 8])]),
        ),
    ]);
    let batch = V::Array(vec![
        V::F64(1.0),
        V::Array(vec![
            stored,
            removed,
            V::Array(vec![V::from("AllBlocksCleared")]),
        ]),
        V::from(0),
    ]);
    rmpv::encode::write_value(&mut sglang, &batch).expect("encode");
    let dynamo_json = br#"{"worker_id":7,"event":{"event_id":3,"dp_rank":1,"data":{"stored":{"parent_hash":1,"blocks":[{"block_hash":2,"tokens_hash":3}]}}}}"#.to_vec();
    let dynamo_msgpack = rmp_serde::to_vec_named(
        &serde_json::from_slice::<serde_json::Value>(&dynamo_json).expect("json"),
    )
    .expect("msgpack");
    vec![sglang, dynamo_json, dynamo_msgpack]
}

fn mutate(rng: &mut StdRng, seed: &[u8]) -> Vec<u8> {
    let mut data = seed.to_vec();
    for _ in 0..rng.random_range(1..6) {
        match rng.random_range(0..4) {
            0 if !data.is_empty() => {
                let i = rng.random_range(0..data.len());
                data[i] = rng.random();
            }
            1 if !data.is_empty() => data.truncate(rng.random_range(0..data.len())),
            2 => {
                let i = rng.random_range(0..=data.len());
                data.insert(i, rng.random());
            }
            _ => {
                let n = rng.random_range(0..8);
                data.extend((0..n).map(|_| rng.random::<u8>()));
            }
        }
    }
    data
}

#[test]
fn decoders_survive_random_and_mutated_input() {
    let _metrics = crate::EVENT_METRICS.blocking_read(); // moves the event counters
    let seeds = seeds();
    let mut rng = StdRng::seed_from_u64(0x6b76_7274);
    let sink = RecordingSink::new();
    let mut feed = RankFeed::new(WorkerId(0), 0, Arc::from("random"), 4, 0, sink.clone());
    let mut accepted = 0usize;
    for i in 0..ITERATIONS {
        let data = if i % 2 == 0 {
            let len = rng.random_range(0..128);
            (0..len).map(|_| rng.random::<u8>()).collect::<Vec<u8>>()
        } else {
            mutate(&mut rng, &seeds[i % seeds.len()])
        };
        accepted += usize::from(decode_batch(&data).is_ok());
        accepted += usize::from(decode_router_event(&data).is_ok());
        let seq = rng.random_range(0..64);
        let _ = feed.offer(seq, Payload::Sglang(&data), false);
    }
    // The mutations keep some inputs valid: the decoders did real work.
    assert!(accepted > 0, "no input decoded at all");
    for seed in &seeds {
        assert!(decode_batch(seed).is_ok() || decode_router_event(seed).is_ok());
    }
}
