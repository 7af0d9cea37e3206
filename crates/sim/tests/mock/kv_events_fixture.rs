//! The mock's KV-event bytes against bytes SGLang 0.5.23's own classes produce
//! (`tests/data/kv_events_0.5.23.txt`, written by `tests/data/gen_kv_events.py`): the same
//! tree operations through the mock's radix cache, merged and encoded, at ts 0.0.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: an unwrap is an assertion

use std::collections::HashMap;

use kvrouter_sim::mock::cache::namespace::{namespace_seed, namespaced_block_hash};
use kvrouter_sim::mock::cache::{CacheEvent, Medium, Namespace, RadixCache};
use kvrouter_sim::mock::config::EventFormat;
use kvrouter_sim::mock::kv_events::coalesce::coalesce;
use kvrouter_sim::mock::kv_events::encode::encode_batch;

fn fixture() -> HashMap<String, String> {
    lines("batch ")
}

fn lines(prefix: &str) -> HashMap<String, String> {
    include_str!("../data/kv_events_0.5.23.txt")
        .lines()
        .filter(|l| l.starts_with(prefix))
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
    encode(coalesce(c.take_events()), c.page_size())
}

fn encode(evs: Vec<CacheEvent>, page: usize) -> String {
    hex(&encode_batch(0.0, &evs, page, 0, EventFormat::Tagged))
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

const LORA_ID: &str = "0123456789abcdef0123456789abcdef";

fn toks(a: u32, b: u32) -> Vec<u32> {
    (a..b).collect()
}

#[test]
fn namespaced_batches_equal_sglang_bytes() {
    let fx = fixture();
    let mut c = RadixCache::new(4);
    c.take_events();
    let salted = c.namespace(&Namespace::for_request(None, Some("tenant-1"), None));
    // Two nodes (a split path): the child's hashes chain from the parent's.
    c.insert_in(salted, &toks(1, 5));
    c.insert_in(salted, &toks(1, 9));
    assert_eq!(take(&mut c), fx["s5_salted"], "salted chain");
    c.insert(&toks(1, 9));
    assert_eq!(take(&mut c), fx["s5_unsalted"], "same tokens, plain tree");
    let lora = c.namespace(&Namespace::for_request(
        None,
        None,
        Some(("adapterA", LORA_ID)),
    ));
    c.insert_in(lora, &toks(1, 9));
    assert_eq!(
        take(&mut c),
        fx["s5_lora"],
        "adapter namespace seeds the hashes"
    );
    // Make every other node more recent, so the adapter's node is the LRU leaf.
    c.match_prefix_in(salted, &toks(1, 9));
    c.match_prefix(&toks(1, 9));
    assert_eq!(c.evict(2), 2);
    assert_eq!(take(&mut c), fx["s5_lora_removed"]);
    let key = c.namespace(&Namespace::for_request(Some("my-key"), None, None));
    c.insert_in(key, &toks(1, 9));
    assert_eq!(
        take(&mut c),
        fx["s5_extra_key"],
        "unregistered extra_key: plain hashes"
    );
    let both = c.namespace(&Namespace::for_request(
        None,
        Some("tenant-1"),
        Some(("adapterA", LORA_ID)),
    ));
    c.insert_in(both, &toks(1, 5));
    assert_eq!(take(&mut c), fx["s5_lora_salted"]);
}

#[test]
fn namespaces_keep_trees_apart() {
    let mut c = RadixCache::new(4);
    let salted = c.namespace(&Namespace::for_request(None, Some("t"), None));
    c.insert(&toks(1, 9));
    assert_eq!(
        c.match_prefix_in(salted, &toks(1, 9)).1,
        0,
        "salt misses plain pages"
    );
    let key = c.namespace(&Namespace::for_request(Some("k"), None, None));
    assert_eq!(
        c.match_prefix_in(key, &toks(1, 9)).1,
        0,
        "extra_key misses plain pages"
    );
    c.insert_in(key, &toks(1, 9));
    assert_eq!(c.match_prefix_in(key, &toks(1, 9)).1, 8);
    assert_eq!(c.tree_pages(), 4, "the same tokens held twice");
}

#[test]
fn host_tier_batches_equal_sglang_bytes() {
    let fx = fixture();
    // Write-back: the evicted node moves to the host; a host drop removes it there.
    let mut c = RadixCache::new(4);
    c.enable_host(2, false);
    c.take_events();
    c.insert(&toks(1, 9));
    c.take_events();
    assert_eq!(c.evict(2), 2);
    assert_eq!(take(&mut c), fx["s6_host_writeback"]);
    c.insert(&toks(20, 28));
    c.take_events();
    c.evict(2);
    let evs = c.take_events();
    assert_eq!(
        encode(coalesce(evs.clone()), 4),
        fx["s6_host_full"],
        "host full"
    );
    let host_drop: Vec<CacheEvent> = evs
        .into_iter()
        .filter(|e| {
            matches!(
                e,
                CacheEvent::Removed {
                    medium: Medium::CpuPinned,
                    ..
                }
            )
        })
        .collect();
    assert_eq!(encode(host_drop, 4), fx["s6_host_evicted"]);
    let key = toks(20, 29);
    let (node, dev) = c.match_prefix(&key);
    let (to, host) = c.host_match(0, node, &key[dev..]);
    assert_eq!((dev, host), (0, 8));
    c.load_back(node, to);
    assert_eq!(take(&mut c), fx["s6_load_back"]);
    // Write-through: every new GPU node is backed up at once.
    let mut c = RadixCache::new(4);
    c.enable_host(8, true);
    c.take_events();
    c.insert(&toks(1, 5));
    assert_eq!(take(&mut c), fx["s6_write_through"]);
}

#[test]
fn dynamo_format_batches_equal_sglang_bytes() {
    let fx = fixture();
    let mut c = RadixCache::new(4);
    c.set_dynamo_format(true);
    c.register_adapter(LORA_ID, "adapterB");
    c.take_events();
    let salted = c.namespace(&Namespace::for_request(None, Some("tenant-1"), None));
    c.insert_in(salted, &toks(1, 5));
    c.insert_in(salted, &toks(1, 9));
    assert_eq!(take(&mut c), fx["s7_dynamo_salted"]);
    let key = c.namespace(&Namespace::for_request(Some("my-key"), None, None));
    c.insert_in(key, &toks(1, 9));
    assert_eq!(take(&mut c), fx["s7_dynamo_extra_key"]);
    // An adapter namespace known only from the adapter table (no request registration).
    let table = c.namespace(&Namespace {
        extra_key: Some(format!("k{LORA_ID}")),
        cache_salt: None,
        lora_name: None,
    });
    c.insert_in(table, &toks(1, 9));
    assert_eq!(take(&mut c), fx["s7_dynamo_adapter_table"]);
    c.insert(&toks(1, 9));
    assert_eq!(take(&mut c), fx["s7_dynamo_plain"]);
}

#[test]
fn namespace_functions_equal_sglang() {
    let h = lines("hash ");
    let v = |k: &str| h[k].parse::<i64>().unwrap();
    let seed = namespace_seed(None, Some("tenant-1"));
    assert_eq!(
        namespaced_block_hash(1, seed.as_ref()),
        v("ns_salt_tenant1_of_1")
    );
    let seed = namespace_seed(Some("ab"), Some("c"));
    assert_eq!(namespaced_block_hash(-5, seed.as_ref()), v("ns_ab_c_of_-5"));
    let seed = namespace_seed(Some("a"), Some("bc"));
    assert_eq!(namespaced_block_hash(-5, seed.as_ref()), v("ns_a_bc_of_-5"));
    let seed = namespace_seed(Some(LORA_ID), None);
    assert_eq!(
        namespaced_block_hash(i64::MIN, seed.as_ref()),
        v("ns_lora_of_i64min")
    );
}
