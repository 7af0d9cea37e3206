//! Multi-threaded test of the residency through `KvIndex`: writer threads on disjoint units
//! (stores from the root and under held blocks, leaf-first removals, holes, clears; every
//! unit's events from one thread) while reader threads issue finds. Finds must never panic and only report
//! units in range, once each, with `1 <= depth <= query length`; at the end the index must
//! equal the union of the writers' models, and emptying it must reclaim every block and run.
//! Bounded: 8 rounds of 3 writers x 600 events of at most 8 blocks; readers stop with the
//! writers.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::super::diff_tests::{
    chain_of, engine_of, random_contents, removal, seqs_of, store_along, Ix, Model, Path,
};

const WRITERS: u32 = 3;
const UNITS_PER_WRITER: u32 = 4;
const UNITS: u32 = WRITERS * UNITS_PER_WRITER;
const ALPHABET: u64 = 3;

/// One writer's events on units `t, t + WRITERS, ...`; returns its model.
fn write(index: &Ix, t: u32, seed: u64) -> Model {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = Model::default();
    for _ in 0..600 {
        let u = t + WRITERS * rng.random_range(0..UNITS_PER_WRITER);
        let held = model.held_by(u);
        let roll = rng.random_range(0..100);
        if roll < 60 {
            let parent_path: Path = if held.is_empty() || roll < 30 {
                Vec::new()
            } else {
                held[rng.random_range(0..held.len())].clone()
            };
            let tail = random_contents(&mut rng, ALPHABET, 8);
            let (engines, parent) = store_along(&parent_path, &tail);
            index
                .store(u, parent, &engines, &tail)
                .expect("consistent hashes store");
            let mut p = parent_path;
            for &c in &tail {
                p.push(c);
                model.holders.entry(p.clone()).or_default().insert(u);
            }
        } else if roll < 95 {
            if held.is_empty() {
                continue;
            }
            let pick = held[rng.random_range(0..held.len())].clone();
            let gone = removal(&held, pick, roll < 85);
            let engines: Vec<u64> = gone.iter().map(|p| engine_of(p)).collect();
            index.remove(u, &engines);
            model.evict(u, &gone);
        } else {
            index.clear(u);
            model.clear(u);
        }
    }
    model
}

fn read(index: &Ix, stop: &AtomicBool, seed: u64) -> usize {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) && n < 1_000_000 {
        let q = random_contents(&mut rng, ALPHABET, 12);
        let got = index.0.find_matches(&seqs_of(&q));
        let mut units = BTreeSet::new();
        for (u, d) in got.units.iter().map(|o| (o.unit.worker.0, o.confirmed)) {
            assert!(u < UNITS, "unit {u} out of range");
            assert!(
                d >= 1 && d as usize <= q.len(),
                "depth {d} for a query of {}",
                q.len()
            );
            assert!(units.insert(u), "unit {u} reported twice");
        }
        n += 1;
    }
    n
}

#[test]
fn writers_and_readers() {
    for round in 0..8u64 {
        let index = Arc::new(Ix::new());
        let stop = Arc::new(AtomicBool::new(false));
        let finds = Arc::new(AtomicUsize::new(0));
        let readers: Vec<_> = (0..2u64)
            .map(|r| {
                let (index, stop, finds) = (index.clone(), stop.clone(), finds.clone());
                std::thread::spawn(move || {
                    finds.fetch_add(read(&index, &stop, 1000 * round + r), Ordering::Relaxed);
                })
            })
            .collect();
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                let index = index.clone();
                std::thread::spawn(move || write(&index, t, 100 * round + u64::from(t)))
            })
            .collect();
        let models: Vec<Model> = writers
            .into_iter()
            .map(|w| w.join().expect("writer"))
            .collect();
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().expect("reader");
        }
        assert!(finds.load(Ordering::Relaxed) > 0);
        let mut model = Model::default();
        for m in models {
            for (p, s) in m.holders {
                model.holders.entry(p).or_default().extend(s);
            }
        }
        let mut rng = StdRng::seed_from_u64(round);
        let mut queries: Vec<Path> = model.holders.keys().cloned().collect();
        queries.extend((0..300).map(|_| random_contents(&mut rng, ALPHABET, 12)));
        for q in &queries {
            let got = index.find(q);
            assert_eq!(got, model.find(q), "round {round}, query {q:?}");
        }
        assert_eq!(index.distinct_blocks(), model.holders.len());
        assert!(index.slab_live() >= model.holders.len());
        for u in 0..UNITS {
            index.clear(u);
        }
        assert_eq!(index.0.resident_blocks(), 0);
        assert_eq!(index.slab_live(), 0, "round {round}: all reclaimed");
        assert_eq!(index.runs(), 0, "round {round}: no runs left");
    }
}

/// Chains longer than a chunk, stores that skip to a new chunk, a prefix crossing a chunk
/// boundary extended by parent, then eviction (the prototype's `long_chains_span_chunks`).
#[test]
fn long_chains_span_chunks() {
    use super::slab::CHUNK;
    let ix = Ix::new();
    let found = |q: &[u64]| ix.find(q);
    // Engine hashes of a chain from the root (incrementally: `engine_of` per prefix is
    // quadratic).
    let n = (CHUNK as usize) * 5 / 2;
    let c: Vec<u64> = (1..=n as u64).collect();
    let e = chain_of(&c);
    ix.store(0, None, &e, &c).expect("store");
    assert_eq!(found(&c), vec![(0, n as u32)]);
    let d: Vec<u64> = (0..u64::from(CHUNK) / 3).map(|i| 1 << 40 | i).collect();
    ix.store(1, None, &chain_of(&d), &d).expect("d");
    let f: Vec<u64> = (0..u64::from(CHUNK) / 2).map(|i| 2 << 40 | i).collect();
    ix.store(1, None, &chain_of(&f), &f).expect("f");
    assert_eq!(found(&f), vec![(1, f.len() as u32)]);
    assert_eq!(found(&d), vec![(1, d.len() as u32)]);
    let k = CHUNK as usize + 10;
    ix.store(2, None, &e[..k], &c[..k]).expect("prefix");
    ix.store(2, Some(e[k - 1]), &e[k..k + 5], &c[k..k + 5])
        .expect("extend");
    assert_eq!(found(&c), vec![(0, n as u32), (2, k as u32 + 5)]);
    ix.remove(0, &e[n / 2..]);
    assert_eq!(found(&c), vec![(0, n as u32 / 2), (2, k as u32 + 5)]);
    ix.clear(0);
    ix.clear(2);
    assert_eq!(found(&c), vec![]);
    assert_eq!(ix.distinct_blocks(), d.len() + f.len());
    ix.clear(1);
    assert_eq!(ix.distinct_blocks(), 0);
    assert_eq!(ix.runs(), 0);
}

/// Churn next to a resident chain: every round stores 40,000 new blocks (two chunks'
/// worth) on one unit and removes them; dead chunks are reused, so the slab stays at a
/// few chunks instead of growing by two a round.
#[test]
fn churn_reuses_dead_chunks() {
    let ix = Ix::new();
    let resident: Vec<u64> = (1..=100).collect();
    ix.store(0, None, &chain_of(&resident), &resident)
        .expect("resident");
    for round in 0..12u64 {
        let c: Vec<u64> = (0..40_000).map(|i| (round + 1) << 32 | i).collect();
        let e = chain_of(&c);
        ix.store(1, None, &e, &c).expect("churn");
        assert_eq!(ix.find(&c), vec![(1, c.len() as u32)]);
        ix.remove(1, &e);
        assert_eq!(ix.find(&resident), vec![(0, 100)]);
    }
    assert_eq!(ix.distinct_blocks(), 100);
    assert!(ix.slab_chunks() <= 4, "{} chunks", ix.slab_chunks());
}

/// Mixed lifetimes: every round stores a 1,000-block chain on one unit and a one-block chain
/// on another that stays, then evicts the long chain. Each chunk keeps some long-lived
/// blocks, so reuse by whole chunks would open a new chunk every 32 rounds; reusing dead
/// ranges keeps the slab at one chunk and the answers right.
#[test]
fn churn_with_long_lived_neighbours_reuses_dead_ranges() {
    let ix = Ix::new();
    let mut kept = Vec::new();
    for round in 0..200u64 {
        let c: Vec<u64> = (0..1_000).map(|i| (round + 1) << 32 | i).collect();
        let e = chain_of(&c);
        ix.store(1, None, &e, &c).expect("churn");
        let k = [(1 << 60) | round];
        ix.store(2, None, &chain_of(&k), &k).expect("kept");
        kept.push(k);
        assert_eq!(ix.find(&c), vec![(1, c.len() as u32)]);
        assert_eq!(ix.remove(1, &e).removed, c.len());
    }
    for k in &kept {
        assert_eq!(ix.find(k), vec![(2, 1)]);
    }
    assert_eq!(ix.distinct_blocks(), kept.len());
    assert_eq!(ix.slab_chunks(), 1, "{} chunks", ix.slab_chunks());
}
