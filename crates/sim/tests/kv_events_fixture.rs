//! The mock's KV-event bytes against bytes SGLang 0.5.23's own classes produce
//! (`tests/data/kv_events_0.5.23.txt`, written by `tests/data/gen_kv_events.py`): the same
//! tree operations through the mock's radix cache, merged and encoded, at ts 0.0.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: an unwrap is an assertion

use std::collections::HashMap;

use kvrouter_sim::mock::cache::RadixCache;
use kvrouter_sim::mock::kv_events::coalesce::coalesce;
use kvrouter_sim::mock::kv_events::encode::{encode_batch, EventFormat};

fn fixture() -> HashMap<String, String> {
    include_str!("data/kv_events_0.5.23.txt")
        .lines()
        .filter(|l| l.starts_with("batch "))
        .map(|l| {
            let mut it = l.split_whitespace().skip(1);
            (
                it.next().unwrap().to_string(),
                it.next().unwrap().to_string(),
            )
        })
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn take(c: &mut RadixCache) -> String {
    let evs = coalesce(c.take_events());
    hex(&encode_batch(
        0.0,
        &evs,
        c.page_size(),
        0,
        EventFormat::Tagged,
    ))
}

#[test]
fn tagged_batches_equal_sglang_bytes() {
    let fx = fixture();
    let mut c = RadixCache::new(16);
    assert_eq!(take(&mut c), fx["s1_cleared"]);
    c.insert(&(100..148).collect::<Vec<u32>>());
    assert_eq!(take(&mut c), fx["s1_stored"]);

    let mut c = RadixCache::new(4);
    c.take_events();
    c.insert(&(1..9).collect::<Vec<u32>>());
    c.insert(&(1..13).collect::<Vec<u32>>());
    c.insert(&(50..54).collect::<Vec<u32>>());
    assert_eq!(take(&mut c), fx["s2_merged_stores"], "linked stores merged");
    c.match_prefix(&(50..54).collect::<Vec<u32>>());
    assert_eq!(c.evict(100), 4);
    c.insert(&(60..64).collect::<Vec<u32>>());
    assert_eq!(take(&mut c), fx["s3_merged_removals"], "removals merged");
    c.evict(100);
    c.take_events();
    c.reset();
    assert_eq!(take(&mut c), fx["s4_cleared"]);
}
