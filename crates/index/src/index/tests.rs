//! Semantics of the index: events, matching, predicted and in-flight layers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::ids::WorkerId;
use crate::tokens::seq_hashes;

const PAGE: u32 = 4;

fn toks(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32).map(|i| i * 7 + salt * 1000).collect()
}

/// SGLang-like opaque engine hashes: unrelated to the router's hashes.
fn engine(seq: u64) -> u64 {
    seq.rotate_left(17) ^ 0xDEAD_BEEF
}

fn stored(parent: Option<u64>, tokens: &[u32]) -> KvEvent {
    stored_after(None, parent, tokens)
}

/// A store of `tokens` chained after router seq `prev_seq` (engine hashes derived from it).
fn stored_after(prev_seq: Option<u64>, parent: Option<u64>, tokens: &[u32]) -> KvEvent {
    let mut seqs = Vec::new();
    crate::tokens::seq_hashes_into(prev_seq, tokens, PAGE as usize, &mut seqs);
    KvEvent::Stored {
        parent,
        block_hashes: seqs.iter().map(|s| engine(*s)).collect(),
        token_ids: tokens.to_vec(),
        block_size: PAGE,
    }
}

fn w(n: u32) -> WorkerId {
    WorkerId(n)
}

fn depth(o: &Overlaps, worker: u32, rank: u32) -> u32 {
    o.get(Unit::new(w(worker), rank)).map_or(0, |u| u.confirmed)
}

#[test]
fn stored_blocks_match_the_request_prefix() {
    let idx = KvIndex::new(PAGE);
    let t = toks(40, 1);
    idx.apply(w(1), 0, &stored(None, &t[..24])).unwrap();
    let q = seq_hashes(&t, PAGE as usize);
    let o = idx.find_matches(&q);
    assert_eq!(o.request_blocks, 10);
    assert_eq!(depth(&o, 1, 0), 6);
    assert_eq!(o.units.len(), 1);
    assert_eq!(idx.resident_blocks(), 6);
}

#[test]
fn chained_stores_use_the_parent_engine_hash() {
    let idx = KvIndex::new(PAGE);
    let t = toks(32, 2);
    let seqs = seq_hashes(&t, PAGE as usize);
    idx.apply(w(1), 0, &stored(None, &t[..12])).unwrap();
    let ev = stored_after(Some(seqs[2]), Some(engine(seqs[2])), &t[12..32]);
    assert_eq!(idx.apply(w(1), 0, &ev).unwrap().stored, 5);
    assert_eq!(depth(&idx.find_matches(&seqs), 1, 0), 8);
}

#[test]
fn applying_twice_changes_nothing() {
    let idx = KvIndex::new(PAGE);
    let t = toks(16, 3);
    let ev = stored(None, &t);
    assert_eq!(idx.apply(w(1), 0, &ev).unwrap().stored, 4);
    let again = idx.apply(w(1), 0, &ev).unwrap();
    assert_eq!((again.stored, again.unchanged), (0, 4));
    assert_eq!(idx.resident_blocks(), 4);
    let KvEvent::Stored { block_hashes, .. } = &ev else {
        unreachable!()
    };
    let rm = KvEvent::Removed {
        block_hashes: block_hashes[2..].to_vec(),
    };
    assert_eq!(idx.apply(w(1), 0, &rm).unwrap().removed, 2);
    assert_eq!(idx.apply(w(1), 0, &rm).unwrap().unchanged, 2);
    assert_eq!(idx.resident_blocks(), 2);
    assert_eq!(idx.stats().unknown_removals, 2);
}

#[test]
fn removal_goes_by_engine_hash_and_only_touches_that_unit() {
    let idx = KvIndex::new(PAGE);
    let t = toks(16, 4);
    let ev = stored(None, &t);
    idx.apply(w(1), 0, &ev).unwrap();
    idx.apply(w(2), 0, &ev).unwrap();
    let KvEvent::Stored { block_hashes, .. } = &ev else {
        unreachable!()
    };
    // Engines evict leaves first: drop the last two pages on worker 1 only.
    idx.apply(
        w(1),
        0,
        &KvEvent::Removed {
            block_hashes: block_hashes[2..].to_vec(),
        },
    )
    .unwrap();
    let o = idx.find_matches(&seq_hashes(&t, PAGE as usize));
    assert_eq!(depth(&o, 1, 0), 2);
    assert_eq!(depth(&o, 2, 0), 4);
    assert_eq!(idx.unit_blocks(w(1), 0), 2);
    assert_eq!(idx.unit_blocks(w(2), 0), 4);
}

#[test]
fn router_format_engine_hashes_work_as_identity() {
    let idx = KvIndex::new(PAGE);
    let t = toks(16, 5);
    let seqs = seq_hashes(&t, PAGE as usize);
    let ev = KvEvent::Stored {
        parent: None,
        block_hashes: seqs.clone(),
        token_ids: t.clone(),
        block_size: PAGE,
    };
    idx.apply(w(1), 0, &ev).unwrap();
    let more = toks(8, 6);
    let ev2 = KvEvent::Stored {
        parent: Some(seqs[3]),
        block_hashes: seqs_after(seqs[3], &more),
        token_ids: more.clone(),
        block_size: PAGE,
    };
    idx.apply(w(1), 0, &ev2).unwrap();
    let mut all = t.clone();
    all.extend(&more);
    assert_eq!(
        depth(&idx.find_matches(&seq_hashes(&all, PAGE as usize)), 1, 0),
        6
    );
    idx.apply(
        w(1),
        0,
        &KvEvent::Removed {
            block_hashes: vec![seqs[3]],
        },
    )
    .unwrap();
    assert_eq!(idx.resident_blocks(), 5);
}

fn seqs_after(prev: u64, tokens: &[u32]) -> Vec<u64> {
    let mut out = Vec::new();
    crate::tokens::seq_hashes_into(Some(prev), tokens, PAGE as usize, &mut out);
    out
}

#[test]
fn a_store_with_an_unknown_parent_is_dropped_and_counted() {
    let idx = KvIndex::new(PAGE);
    let t = toks(8, 7);
    let err = idx.apply(w(1), 0, &stored(Some(12345), &t)).unwrap_err();
    assert_eq!(err, IndexError::UnknownParent { parent: 12345 });
    assert_eq!(idx.resident_blocks(), 0);
    assert_eq!(idx.stats().unknown_parent_stores, 1);
}

#[test]
fn malformed_stores_are_refused() {
    let idx = KvIndex::new(PAGE);
    let bad_size = KvEvent::Stored {
        parent: None,
        block_hashes: vec![1],
        token_ids: toks(8, 0),
        block_size: 8,
    };
    assert!(matches!(
        idx.apply(w(1), 0, &bad_size),
        Err(IndexError::PageSizeMismatch {
            expected: 4,
            got: 8
        })
    ));
    let bad_len = KvEvent::Stored {
        parent: None,
        block_hashes: vec![1, 2],
        token_ids: toks(6, 0),
        block_size: 4,
    };
    assert!(matches!(
        idx.apply(w(1), 0, &bad_len),
        Err(IndexError::TokenCountMismatch { .. })
    ));
    assert!(matches!(
        idx.apply(WorkerId(u32::MAX), 0, &KvEvent::Cleared),
        Err(IndexError::UnitOutOfRange { .. })
    ));
}

#[test]
fn cleared_and_clear_rank_empty_one_rank() {
    let idx = KvIndex::new(PAGE);
    let t = toks(16, 8);
    idx.apply(w(1), 0, &stored(None, &t)).unwrap();
    idx.apply(w(1), 1, &stored(None, &t)).unwrap();
    idx.apply(w(1), 0, &KvEvent::Cleared).unwrap();
    assert_eq!(idx.unit_blocks(w(1), 0), 0);
    assert_eq!(idx.unit_blocks(w(1), 1), 4);
    idx.clear_rank(w(1), 1);
    assert_eq!(idx.resident_blocks(), 0);
    assert_eq!(idx.distinct_blocks(), 0);
    // The rank keeps working after a clear.
    idx.apply(w(1), 0, &stored(None, &t)).unwrap();
    assert_eq!(idx.unit_blocks(w(1), 0), 4);
}

#[test]
fn remove_worker_drops_all_its_ranks_and_bookings() {
    let idx = KvIndex::new(PAGE);
    let t = toks(16, 9);
    let q = seq_hashes(&t, PAGE as usize);
    for rank in 0..3 {
        idx.apply(w(5), rank, &stored(None, &t)).unwrap();
    }
    idx.apply(w(6), 0, &stored(None, &t)).unwrap();
    let b = idx
        .book(w(5), 0, &q, Duration::from_secs(60))
        .unwrap()
        .detach();
    idx.remove_worker(w(5));
    let o = idx.find_matches(&q);
    assert_eq!(o.units.len(), 1);
    assert_eq!(depth(&o, 6, 0), 4);
    assert_eq!(idx.resident_blocks(), 4);
    assert_eq!(idx.inflight_blocks(w(5), 0), 0);
    idx.cancel(b); // already gone: harmless
}

#[test]
fn many_holders_spill_and_report_each_depth() {
    let idx = KvIndex::new(PAGE);
    let t = toks(64, 10);
    let q = seq_hashes(&t, PAGE as usize);
    for n in 0..40u32 {
        idx.apply(w(n), 0, &stored(None, &t[..(n as usize % 16 + 1) * 4]))
            .unwrap();
    }
    let o = idx.find_matches(&q);
    assert_eq!(o.units.len(), 40);
    for n in 0..40u32 {
        assert_eq!(depth(&o, n, 0), n % 16 + 1, "worker {n}");
    }
}

#[test]
fn nobody_holding_the_first_block_gives_an_empty_answer() {
    let idx = KvIndex::new(PAGE);
    idx.apply(w(1), 0, &stored(None, &toks(16, 11))).unwrap();
    let o = idx.find_matches(&seq_hashes(&toks(16, 12), PAGE as usize));
    assert!(o.units.is_empty());
    assert_eq!(o.prefill_added(Unit::new(w(1), 0)), 4);
    assert!(idx.find_matches(&[]).units.is_empty());
}

#[test]
fn predictions_count_as_cached_until_they_expire() {
    let idx = KvIndex::new(PAGE);
    let t0 = Instant::now();
    let q = seq_hashes(&toks(32, 13), PAGE as usize);
    let mut b = idx
        .book_at(w(1), 0, &q[..6], Duration::from_secs(10), t0)
        .unwrap();
    let o = idx.find_matches_at(&q, t0);
    let u = o.get(Unit::new(w(1), 0)).copied().unwrap();
    assert_eq!((u.confirmed, u.predicted, u.inflight), (0, 6, 6));
    assert_eq!(u.cached(), 6);
    assert_eq!(u.prefill_added(8), 2);
    b.prefill_done();
    let u = idx.find_matches_at(&q, t0).units[0];
    assert_eq!((u.predicted, u.inflight), (6, 0));
    // Queries ignore an expired prediction even before the sweep runs.
    assert!(idx
        .find_matches_at(&q, t0 + Duration::from_secs(11))
        .units
        .is_empty());
    idx.expire_predictions(t0 + Duration::from_secs(11));
    assert!(idx.find_matches_at(&q, t0).units.is_empty());
    drop(b);
}

#[test]
fn dropping_a_booking_before_prefill_cancels_it() {
    let idx = KvIndex::new(PAGE);
    let q = seq_hashes(&toks(32, 14), PAGE as usize);
    let b = idx.book(w(1), 0, &q, Duration::from_secs(60)).unwrap();
    assert_eq!(idx.inflight_blocks(w(1), 0), 8);
    drop(b);
    assert!(idx.find_matches(&q).units.is_empty());
    assert_eq!(idx.inflight_blocks(w(1), 0), 0);
    let id = idx
        .book(w(1), 0, &q, Duration::from_secs(60))
        .unwrap()
        .detach();
    assert_eq!(idx.find_matches(&q).cached(Unit::new(w(1), 0)), 8);
    idx.cancel(id);
    assert!(idx.find_matches(&q).units.is_empty());
}

#[test]
fn a_real_store_supersedes_the_prediction() {
    let idx = KvIndex::new(PAGE);
    let t = toks(16, 15);
    let q = seq_hashes(&t, PAGE as usize);
    let mut b = idx.book(w(1), 0, &q, Duration::from_secs(60)).unwrap();
    b.prefill_done();
    let ev = stored(None, &t);
    idx.apply(w(1), 0, &ev).unwrap();
    let u = idx.find_matches(&q).units[0];
    assert_eq!((u.confirmed, u.predicted), (4, 0));
    // Evicted after confirmation: the stale prediction does not resurrect it.
    let KvEvent::Stored { block_hashes, .. } = ev else {
        unreachable!()
    };
    idx.apply(w(1), 0, &KvEvent::Removed { block_hashes })
        .unwrap();
    assert!(idx.find_matches(&q).units.is_empty());
}

#[test]
fn an_eviction_voids_the_prediction_of_that_block() {
    let idx = KvIndex::new(PAGE);
    let t = toks(16, 17);
    let q = seq_hashes(&t, PAGE as usize);
    let ev = stored(None, &t);
    idx.apply(w(1), 0, &ev).unwrap();
    // Routed to the holder: its blocks are predicted there too.
    let mut b = idx.book(w(1), 0, &q, Duration::from_secs(60)).unwrap();
    b.prefill_done();
    let u = idx.find_matches(&q).units[0];
    assert_eq!((u.confirmed, u.predicted), (4, 4));
    // The worker evicts them: no prediction keeps them cached in the router's view.
    let KvEvent::Stored { block_hashes, .. } = ev else {
        unreachable!()
    };
    idx.apply(w(1), 0, &KvEvent::Removed { block_hashes })
        .unwrap();
    assert!(idx.find_matches(&q).units.is_empty());
    // A prediction on another unit is untouched.
    let _other = idx.book(w(2), 0, &q, Duration::from_secs(60)).unwrap();
    let ev = stored(None, &t);
    idx.apply(w(1), 0, &ev).unwrap();
    let KvEvent::Stored { block_hashes, .. } = ev else {
        unreachable!()
    };
    idx.apply(w(1), 0, &KvEvent::Removed { block_hashes })
        .unwrap();
    let o = idx.find_matches(&q);
    assert_eq!(o.cached(Unit::new(w(2), 0)), 4);
    assert_eq!(o.cached(Unit::new(w(1), 0)), 0);
}

#[test]
fn siblings_share_in_flight_blocks_once() {
    let idx = KvIndex::new(PAGE);
    let q = seq_hashes(&toks(40, 16), PAGE as usize);
    let ttl = Duration::from_secs(60);
    let mut a = idx.book(w(1), 0, &q, ttl).unwrap();
    let b = idx.book(w(1), 0, &q, ttl).unwrap();
    let c = idx.book(w(1), 0, &q[..4], ttl).unwrap();
    assert_eq!(idx.inflight_blocks(w(1), 0), 10);
    a.prefill_done();
    assert_eq!(idx.inflight_blocks(w(1), 0), 10);
    drop(b);
    assert_eq!(idx.inflight_blocks(w(1), 0), 4);
    let u = idx.find_matches(&q).units[0];
    assert_eq!((u.predicted, u.inflight), (10, 4));
    drop(c);
    assert_eq!(idx.inflight_blocks(w(1), 0), 0);
    assert_eq!(idx.find_matches(&q).units[0].predicted, 10);
    drop(a);
}

#[test]
fn confirmed_and_predicted_combine_per_unit() {
    let idx = KvIndex::new(PAGE);
    let t = toks(40, 17);
    let q = seq_hashes(&t, PAGE as usize);
    idx.apply(w(1), 0, &stored(None, &t[..8])).unwrap();
    idx.apply(w(2), 0, &stored(None, &t[..20])).unwrap();
    let _b = idx.book(w(3), 0, &q, Duration::from_secs(60)).unwrap();
    let o = idx.find_matches(&q);
    assert_eq!(o.units.len(), 3);
    assert_eq!(o.cached(Unit::new(w(1), 0)), 2);
    assert_eq!(o.cached(Unit::new(w(2), 0)), 5);
    assert_eq!(o.cached(Unit::new(w(3), 0)), 10);
    assert_eq!(o.prefill_added(Unit::new(w(3), 0)), 0);
    assert_eq!(o.prefill_added(Unit::new(w(4), 0)), 10);
}

#[test]
fn memory_is_released_after_eviction_and_reused_on_refill() {
    // The tables, runs and per-unit state are given back; the slab's pages (20 B per block
    // slot) stay allocated and are reused (readers may be reading them without the writer,
    // see `residency/`), so a refill to the same size does not grow the index.
    let idx = KvIndex::new(PAGE);
    let empty = idx.memory_bytes();
    let mut events = Vec::new();
    for s in 0..200 {
        let ev = stored(None, &toks(64, 100 + s));
        idx.apply(w(s % 8), 0, &ev).unwrap();
        events.push((s % 8, ev));
    }
    let full = idx.memory_bytes();
    assert_eq!(idx.resident_blocks(), 200 * 16);
    let evict = |events: &[(u32, KvEvent)]| {
        for (worker, ev) in events {
            let KvEvent::Stored { block_hashes, .. } = ev else {
                unreachable!()
            };
            let rm = KvEvent::Removed {
                block_hashes: block_hashes.clone(),
            };
            idx.apply(w(*worker), 0, &rm).unwrap();
        }
    };
    evict(&events);
    assert_eq!(idx.resident_blocks(), 0);
    assert_eq!(idx.distinct_blocks(), 0);
    let after = idx.memory_bytes();
    assert!(
        after < full - 200 * 16 * 9,
        "empty {empty} full {full} after {after}"
    );
    for (worker, ev) in &events {
        idx.apply(w(*worker), 0, ev).unwrap();
    }
    // (The free run-id list keeps its capacity: a few bytes per run.)
    let refill = idx.memory_bytes();
    assert!(refill <= full + full / 20, "refill {refill} full {full}");
    evict(&events);
    let again = idx.memory_bytes();
    assert!(again <= after + after / 20, "after {after} again {again}");
}

#[test]
fn concurrent_events_and_queries_end_consistent() {
    let idx = Arc::new(KvIndex::new(PAGE));
    let shared = toks(32, 18);
    let q = seq_hashes(&shared, PAGE as usize);
    let writers: Vec<_> = (0..4u32)
        .map(|n| {
            let idx = idx.clone();
            let shared = shared.clone();
            std::thread::spawn(move || {
                for round in 0..50 {
                    idx.apply(w(n), 0, &stored(None, &shared)).unwrap();
                    idx.apply(w(n), 0, &stored(None, &toks(16, 1000 + n * 100 + round)))
                        .unwrap();
                    if round % 2 == 0 {
                        idx.apply(w(n), 0, &KvEvent::Cleared).unwrap();
                    }
                }
                idx.apply(w(n), 0, &stored(None, &shared)).unwrap();
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let idx = idx.clone();
            let q = q.clone();
            std::thread::spawn(move || {
                for _ in 0..500 {
                    let o = idx.find_matches(&q);
                    assert!(o
                        .units
                        .iter()
                        .all(|u| u.confirmed <= 8 && u.unit.worker.0 < 4));
                }
            })
        })
        .collect();
    for t in writers.into_iter().chain(readers) {
        t.join().unwrap();
    }
    let o = idx.find_matches(&q);
    assert_eq!(o.units.len(), 4);
    assert!(o.units.iter().all(|u| u.confirmed == 8));
    // 8 shared blocks per worker + the odd round's 4 private blocks (round 49).
    assert_eq!(idx.resident_blocks(), 4 * (8 + 4));
}

#[test]
fn gauges_are_registered() {
    let idx = KvIndex::new(PAGE);
    idx.apply(w(1), 0, &stored(None, &toks(16, 19))).unwrap();
    idx.update_gauges();
    let mut buf = Vec::new();
    let families = super::metrics_registry().gather();
    prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &families, &mut buf).unwrap();
    let text = String::from_utf8(buf).unwrap();
    assert!(text.contains("kvrouter_index_blocks"));
    assert!(text.contains("kvrouter_index_bytes"));
}

#[test]
fn concurrent_bookings_events_and_queries_release_everything() {
    let idx = Arc::new(KvIndex::new(PAGE));
    let t = toks(64, 20);
    let q = seq_hashes(&t, PAGE as usize);
    let bookers: Vec<_> = (0..3u32)
        .map(|n| {
            let (idx, q) = (idx.clone(), q.clone());
            std::thread::spawn(move || {
                for round in 0..200 {
                    let mut b = idx.book(w(n), 0, &q, Duration::from_secs(60)).unwrap();
                    if round % 3 == 0 {
                        b.prefill_done();
                        b.cancel();
                    }
                }
            })
        })
        .collect();
    let writer = {
        let (idx, t) = (idx.clone(), t.clone());
        std::thread::spawn(move || {
            for _ in 0..100 {
                idx.apply(w(1), 0, &stored(None, &t)).unwrap();
                idx.apply(w(1), 0, &KvEvent::Cleared).unwrap();
            }
        })
    };
    let reader = {
        let (idx, q) = (idx.clone(), q.clone());
        std::thread::spawn(move || {
            for _ in 0..300 {
                let o = idx.find_matches(&q);
                assert!(o.units.iter().all(|u| u.cached() <= 16 && u.inflight <= 16));
            }
        })
    };
    for h in bookers.into_iter().chain([writer, reader]) {
        h.join().unwrap();
    }
    for n in 0..3 {
        assert_eq!(idx.inflight_blocks(w(n), 0), 0);
    }
    assert!(idx.find_matches(&q).units.is_empty());
}

#[test]
fn content_hashed_stores_match_token_stores() {
    let t = toks(24, 3);
    let by_tokens = KvIndex::new(PAGE);
    by_tokens.apply(w(1), 0, &stored(None, &t)).unwrap();
    let KvEvent::Stored { block_hashes, .. } = stored(None, &t) else {
        unreachable!()
    };
    let by_hashes = KvIndex::new(PAGE);
    let local_hashes = t
        .chunks_exact(PAGE as usize)
        .map(crate::tokens::local_hash)
        .collect();
    let event = KvEvent::StoredHashed {
        parent: None,
        block_hashes: block_hashes.clone(),
        local_hashes,
    };
    by_hashes.apply(w(1), 0, &event).unwrap();
    let q = seq_hashes(&t, PAGE as usize);
    assert_eq!(depth(&by_hashes.find_matches(&q), 1, 0), 6);
    assert_eq!(
        depth(&by_tokens.find_matches(&q), 1, 0),
        depth(&by_hashes.find_matches(&q), 1, 0)
    );
    let short = KvEvent::StoredHashed {
        parent: None,
        block_hashes,
        local_hashes: vec![1],
    };
    assert!(matches!(
        by_hashes.apply(w(2), 0, &short),
        Err(IndexError::HashCountMismatch { .. })
    ));
}

#[test]
fn a_warm_booking_marks_only_its_uncached_suffix_in_flight() {
    let idx = KvIndex::new(PAGE);
    let t = toks(40, 5);
    let q = seq_hashes(&t, PAGE as usize);
    let now = Instant::now();
    let ttl = Duration::from_secs(10);
    let mut booking = idx.book_from_at(w(1), 0, &q, 6, ttl, now).unwrap();
    assert_eq!(
        idx.inflight_blocks(w(1), 0),
        4,
        "blocks 6..10 are prefilled"
    );
    let o = idx.find_matches_at(&q, now);
    assert_eq!(o.get(Unit::new(w(1), 0)).map(|u| u.predicted), Some(10));
    booking.prefill_done();
    assert_eq!(idx.inflight_blocks(w(1), 0), 0);
    let cold = idx.book_from_at(w(2), 0, &q, 0, ttl, now).unwrap();
    assert_eq!(idx.inflight_blocks(w(2), 0), 10);
    cold.cancel();
    assert_eq!(idx.inflight_blocks(w(2), 0), 0);
}

#[test]
fn a_unit_past_its_capacity_cap_is_cleared_alone() {
    let idx = KvIndex::new(PAGE);
    // 32 tokens of capacity = 8 pages, + 0 (8 / 10) + 64 slack = 72 entries per unit.
    idx.set_worker_capacity(w(1), Some(32));
    assert_eq!(idx.unit_cap(w(1), 0), 72);
    assert_eq!(idx.unit_cap(w(2), 0), DEFAULT_UNIT_CAP_BLOCKS);
    let other = toks(16, 9);
    idx.apply(w(2), 0, &stored(None, &other)).unwrap();
    idx.apply(w(1), 1, &stored(None, &other)).unwrap();
    // Up to the cap: applied as usual.
    let t = toks(72 * PAGE as usize, 1);
    let applied = idx.apply(w(1), 0, &stored(None, &t)).unwrap();
    assert_eq!(applied.stored, 72);
    assert_eq!(idx.unit_blocks(w(1), 0), 72);
    // Re-storing resident blocks is not growth.
    idx.apply(w(1), 0, &stored(None, &t[..16])).unwrap();
    assert_eq!(idx.unit_blocks(w(1), 0), 72);
    // One more block: the unit is cleared, the others keep theirs.
    let more = toks(4, 2);
    assert_eq!(
        idx.apply(w(1), 0, &stored(None, &more)),
        Err(IndexError::CapExceeded {
            blocks: 73,
            cap: 72
        })
    );
    assert_eq!(idx.unit_blocks(w(1), 0), 0);
    assert_eq!(idx.unit_blocks(w(1), 1), 4);
    assert_eq!(idx.unit_blocks(w(2), 0), 4);
    assert_eq!(idx.resident_blocks(), 8);
    // The unit stays usable: later stores apply (within the cap).
    idx.apply(w(1), 0, &stored(None, &more)).unwrap();
    assert_eq!(idx.unit_blocks(w(1), 0), 1);
    // A new capacity reaches existing units too.
    idx.set_worker_capacity(w(1), None);
    assert_eq!(idx.unit_cap(w(1), 0), DEFAULT_UNIT_CAP_BLOCKS);
}

fn ns(salt: Option<&str>, lora: Option<&str>) -> Option<u64> {
    crate::tokens::NamespaceParts {
        cache_salt: salt,
        lora,
        ..Default::default()
    }
    .key()
}

/// A request's sequence hashes in namespace `key`.
fn seqs_in(key: Option<u64>, tokens: &[u32]) -> Vec<u64> {
    let mut out = Vec::new();
    crate::tokens::seq_hashes_into(key, tokens, PAGE as usize, &mut out);
    out
}

#[test]
fn namespaced_stores_match_only_requests_of_their_namespace() {
    let idx = KvIndex::new(PAGE);
    let t = toks(16, 1);
    let salted = ns(Some("tenant-1"), None);
    let place = Placement {
        namespace: salted,
        tier: Tier::Gpu,
    };
    // First half as one store, the rest chained by engine hash: the child inherits the key.
    let first = stored_after(salted, None, &t[..8]);
    let KvEvent::Stored { block_hashes, .. } = &first else {
        unreachable!()
    };
    let tail_parent = *block_hashes.last().unwrap();
    idx.apply_in(w(1), 0, place, &first).unwrap();
    let prev = seqs_in(salted, &t[..8]).last().copied();
    idx.apply_in(
        w(1),
        0,
        place,
        &stored_after(prev, Some(tail_parent), &t[8..]),
    )
    .unwrap();
    // The same tokens unsalted (the default namespace) on worker 2.
    idx.apply(w(2), 0, &stored(None, &t[..8])).unwrap();

    assert_eq!(depth(&idx.find_matches(&seqs_in(salted, &t)), 1, 0), 4);
    assert_eq!(depth(&idx.find_matches(&seqs_in(salted, &t)), 2, 0), 0);
    let plain = idx.find_matches(&seq_hashes(&t, PAGE as usize));
    assert_eq!((depth(&plain, 1, 0), depth(&plain, 2, 0)), (0, 2));
    let other = ns(Some("tenant-2"), None);
    assert!(idx.find_matches(&seqs_in(other, &t)).units.is_empty());
    let adapter = ns(None, Some("adapterA"));
    assert!(idx.find_matches(&seqs_in(adapter, &t)).units.is_empty());
    // Removal by engine hash works as for the default namespace.
    idx.apply(
        w(1),
        0,
        &KvEvent::Removed {
            block_hashes: vec![tail_parent],
        },
    )
    .unwrap();
    assert_eq!(idx.unit_blocks(w(1), 0), 3);
}

/// The same pages under a second engine namespace the events do not tell apart (SGLang 0.5.23:
/// a LoRA request with an `extra_key` publishes other hashes than the adapter's plain copy, but
/// the same `lora_name`): distinct engine hashes, the same router blocks.
fn stored_copy(prev_seq: Option<u64>, tokens: &[u32]) -> KvEvent {
    let mut seqs = Vec::new();
    crate::tokens::seq_hashes_into(prev_seq, tokens, PAGE as usize, &mut seqs);
    KvEvent::Stored {
        parent: None,
        block_hashes: seqs
            .iter()
            .map(|s| engine(*s) ^ 0x5A5A_0000_0000_0001)
            .collect(),
        token_ids: tokens.to_vec(),
        block_size: PAGE,
    }
}

fn copy_removed(prev_seq: Option<u64>, tokens: &[u32]) -> KvEvent {
    let KvEvent::Stored { block_hashes, .. } = stored_copy(prev_seq, tokens) else {
        unreachable!()
    };
    KvEvent::Removed { block_hashes }
}

#[test]
fn evicting_a_decoy_copy_keeps_the_holder_of_the_other_copy() {
    // Failed before per-unit copy counting: the decoy's removal dropped worker 1 as the holder
    // of blocks 0-1, so its 8-page copy matched 0 pages.
    let adapter = ns(None, Some("adapterA"));
    let place = Placement {
        namespace: adapter,
        tier: Tier::Gpu,
    };
    let t = toks(32, 3);
    let idx = KvIndex::new(PAGE);
    // The real holder: 8 pages. The decoy: the first 2 pages again, other engine hashes.
    idx.apply_in(w(1), 0, place, &stored_after(adapter, None, &t))
        .unwrap();
    idx.apply_in(w(1), 0, place, &stored_copy(adapter, &t[..8]))
        .unwrap();
    assert_eq!(idx.unit_blocks(w(1), 0), 10);
    let removed = idx
        .apply_in(w(1), 0, place, &copy_removed(adapter, &t[..8]))
        .unwrap();
    assert_eq!(removed.removed, 2);
    let q = seqs_in(adapter, &t);
    assert_eq!(depth(&idx.find_matches(&q), 1, 0), 8);
    assert_eq!(idx.unit_blocks(w(1), 0), 8);
    assert_eq!(idx.resident_blocks(), 8);
    // The last copy's removal drops the holder.
    let KvEvent::Stored { block_hashes, .. } = stored_after(adapter, None, &t) else {
        unreachable!()
    };
    idx.apply(
        w(1),
        0,
        &KvEvent::Removed {
            block_hashes: block_hashes[..2].to_vec(),
        },
    )
    .unwrap();
    assert_eq!(depth(&idx.find_matches(&q), 1, 0), 0);
    assert_eq!(idx.distinct_blocks(), 6);
}

#[test]
fn copies_removed_in_either_order_and_cleared_leave_nothing() {
    let t = toks(16, 5);
    let idx = KvIndex::new(PAGE);
    idx.apply(w(1), 0, &stored(None, &t)).unwrap();
    idx.apply(w(1), 0, &stored_copy(None, &t)).unwrap();
    // The same engine hash again is no new copy (idempotent).
    idx.apply(w(1), 0, &stored_copy(None, &t)).unwrap();
    let q = seq_hashes(&t, PAGE as usize);
    // The first copy goes: the second keeps the blocks.
    let KvEvent::Stored { block_hashes, .. } = stored(None, &t) else {
        unreachable!()
    };
    idx.apply(w(1), 0, &KvEvent::Removed { block_hashes })
        .unwrap();
    assert_eq!(depth(&idx.find_matches(&q), 1, 0), 4);
    idx.apply(w(1), 0, &copy_removed(None, &t)).unwrap();
    assert!(idx.find_matches(&q).units.is_empty());
    assert_eq!(idx.distinct_blocks(), 0);
    // Two copies, then a clear: nothing is left to count.
    idx.apply(w(1), 0, &stored(None, &t)).unwrap();
    idx.apply(w(1), 0, &stored_copy(None, &t)).unwrap();
    idx.apply(w(1), 0, &KvEvent::Cleared).unwrap();
    assert_eq!(idx.distinct_blocks(), 0);
    idx.apply(w(1), 0, &stored(None, &t)).unwrap();
    let KvEvent::Stored { block_hashes, .. } = stored(None, &t) else {
        unreachable!()
    };
    idx.apply(w(1), 0, &KvEvent::Removed { block_hashes })
        .unwrap();
    assert_eq!(idx.distinct_blocks(), 0, "a stale count survived the clear");
}

fn calib(idx: &KvIndex, worker: u32) -> PredictionCalibration {
    idx.prediction_calibration(w(worker), 0, Instant::now())
}

#[test]
fn a_store_event_confirms_the_predicted_blocks_it_names() {
    let idx = KvIndex::new(PAGE);
    let t = toks(32, 40);
    let q = seq_hashes(&t, PAGE as usize);
    // The unit holds the first 3 blocks: only the other 5 are a bet.
    idx.apply(w(1), 0, &stored(None, &t[..12])).unwrap();
    let mut b = idx
        .book_from_at(w(1), 0, &q, 3, Duration::from_secs(60), Instant::now())
        .unwrap();
    assert_eq!(calib(&idx, 1).booked, 5);
    b.prefill_done();
    idx.apply(
        w(1),
        0,
        &stored_after(Some(q[2]), Some(engine(q[2])), &t[12..]),
    )
    .unwrap();
    let c = calib(&idx, 1);
    assert_eq!(
        (c.confirmed, c.expired, c.removed, c.cancelled),
        (5, 0, 0, 0)
    );
    assert!(c.confirm_secs.is_some() && c.learned_ttl.is_some(), "{c:?}");
    assert_eq!(c.confirm_ratio, 1.0);
}

#[test]
fn an_unconfirmed_prediction_expires_as_a_miss_unless_its_prefill_is_in_flight() {
    let idx = KvIndex::new(PAGE);
    // The unit sends events (so its predictions are calibrated), but not of this prompt.
    idx.apply(w(1), 0, &stored(None, &toks(8, 41))).unwrap();
    let (t0, ttl) = (Instant::now(), Duration::from_secs(1));
    let q = seq_hashes(&toks(32, 42), PAGE as usize);
    let mut done = idx.book_at(w(1), 0, &q[..4], ttl, t0).unwrap();
    done.prefill_done();
    let running = idx.book_at(w(1), 0, &q[4..], ttl, t0).unwrap();
    idx.expire_predictions(t0 + Duration::from_secs(2));
    let c = calib(&idx, 1);
    // The finished one missed; the one in flight still awaits its store.
    assert_eq!((c.booked, c.expired, c.confirmed), (8, 4, 0));
    assert!(c.confirm_ratio < 1.0, "{c:?}");
    drop(done);
    drop(running);
    // A request that fails before prefill is no miss of the unit's.
    assert_eq!(calib(&idx, 1).cancelled, 4);
}

#[test]
fn an_eviction_of_a_predicted_block_counts_as_removed() {
    let idx = KvIndex::new(PAGE);
    let t = toks(16, 43);
    let q = seq_hashes(&t, PAGE as usize);
    let ev = stored(None, &t);
    idx.apply(w(1), 0, &ev).unwrap();
    // Booked as if the unit held nothing (a stale view): every block awaits.
    let mut b = idx.book(w(1), 0, &q, Duration::from_secs(60)).unwrap();
    b.prefill_done();
    let KvEvent::Stored { block_hashes, .. } = ev else {
        unreachable!()
    };
    idx.apply(w(1), 0, &KvEvent::Removed { block_hashes })
        .unwrap();
    let c = calib(&idx, 1);
    assert_eq!((c.booked, c.removed, c.confirmed), (4, 4, 0));
}

#[test]
fn a_unit_without_events_keeps_full_credit_and_a_removed_worker_starts_over() {
    let idx = KvIndex::new(PAGE);
    let (t0, ttl) = (Instant::now(), Duration::from_millis(10));
    let q = seq_hashes(&toks(16, 44), PAGE as usize);
    let mut b = idx.book_at(w(2), 0, &q, ttl, t0).unwrap();
    b.prefill_done();
    idx.expire_predictions(t0 + Duration::from_secs(1));
    let c = calib(&idx, 2);
    assert_eq!(c.expired, 4);
    assert_eq!(
        c.confirm_ratio, 1.0,
        "no event feed: nothing to calibrate against"
    );
    idx.apply(w(2), 0, &stored(None, &toks(8, 45))).unwrap();
    assert!(calib(&idx, 2).confirm_ratio < 1.0);
    idx.remove_worker(w(2));
    assert_eq!(calib(&idx, 2).booked, 0);
}

/// The digest `/debug/index` reports and the conformance harness recomputes from the engine's
/// tree by content: the XOR of the unit's resident sequence hashes, whatever engine hashes
/// named them, kept exact through removals.
#[test]
fn a_units_digest_is_the_xor_of_its_resident_sequence_hashes() {
    let idx = KvIndex::new(PAGE);
    let t = toks(24, 3);
    let seqs = seq_hashes(&t, PAGE as usize);
    let xor = |s: &[u64]| s.iter().fold(0u64, |a, x| a ^ x);
    idx.apply(w(1), 0, &stored(None, &t)).unwrap();
    assert_eq!(idx.unit_digest(w(1), 0), xor(&seqs));
    let last = KvEvent::Removed {
        block_hashes: vec![engine(seqs[5])],
    };
    idx.apply(w(1), 0, &last).unwrap();
    assert_eq!(idx.unit_digest(w(1), 0), xor(&seqs[..5]));
    // Another unit naming the same blocks its own way: the same digest.
    let own = KvEvent::Stored {
        parent: None,
        block_hashes: seqs[..5].iter().map(|s| s ^ 0x5A5A).collect(),
        token_ids: t[..20].to_vec(),
        block_size: PAGE,
    };
    idx.apply(w(2), 0, &own).unwrap();
    assert_eq!(idx.unit_digest(w(2), 0), xor(&seqs[..5]));
    idx.clear_rank(w(1), 0);
    assert_eq!(idx.unit_digest(w(1), 0), 0);
}
