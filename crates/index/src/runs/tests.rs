//! Unit tests of `RunIndex`: store, extend, branch, split, remove, holes, clear, find.

use super::{RunError, RunIndex};

/// Engine hash of a block: a function of the parent's engine hash and the content, the
/// same on every unit (as SGLang's).
fn eh(parent: u64, content: u64) -> u64 {
    (parent ^ content.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .rotate_left(17)
        .wrapping_mul(0xBF58_476D_1CE4_E5B9)
        ^ 0x5EED
}

/// Engine hashes of a chain with contents `c` from the root.
fn engines(c: &[u64]) -> Vec<u64> {
    let mut p = 0;
    c.iter()
        .map(|&x| {
            p = eh(p, x);
            p
        })
        .collect()
}

fn found(ix: &mut RunIndex, q: &[u64]) -> Vec<(u32, u32)> {
    let mut v = ix.find(q).to_vec();
    v.sort_unstable();
    v
}

fn store(ix: &mut RunIndex, unit: u32, c: &[u64]) {
    ix.store(unit, None, &engines(c), c).expect("store");
}

#[test]
fn store_and_find_one_chain() {
    let mut ix = RunIndex::new();
    store(&mut ix, 0, &[1, 2, 3, 4]);
    assert_eq!(found(&mut ix, &[1, 2, 3, 4]), vec![(0, 4)]);
    assert_eq!(found(&mut ix, &[1, 2, 9]), vec![(0, 2)]);
    assert_eq!(found(&mut ix, &[1, 2, 3, 4, 5]), vec![(0, 4)]);
    assert_eq!(found(&mut ix, &[2]), vec![]);
    assert_eq!(found(&mut ix, &[]), vec![]);
    assert_eq!(ix.runs(), 1);
    assert_eq!(ix.distinct_blocks(), 4);
}

#[test]
fn second_unit_shares_the_run() {
    let mut ix = RunIndex::new();
    store(&mut ix, 0, &[1, 2, 3, 4]);
    store(&mut ix, 1, &[1, 2]);
    assert_eq!(ix.runs(), 1);
    assert_eq!(ix.distinct_blocks(), 4);
    assert_eq!(found(&mut ix, &[1, 2, 3, 4]), vec![(0, 4), (1, 2)]);
    // Re-storing is a no-op.
    store(&mut ix, 1, &[1, 2]);
    store(&mut ix, 0, &[1, 2, 3]);
    assert_eq!(found(&mut ix, &[1, 2, 3, 4]), vec![(0, 4), (1, 2)]);
}

#[test]
fn extend_with_parent() {
    let mut ix = RunIndex::new();
    store(&mut ix, 0, &[1, 2]);
    let e = engines(&[1, 2, 3, 4]);
    ix.store(0, Some(e[1]), &e[2..], &[3, 4]).expect("extend");
    assert_eq!(ix.runs(), 1, "the unit's own last run grows in place");
    assert_eq!(found(&mut ix, &[1, 2, 3, 4]), vec![(0, 4)]);
    // Another unit extending from a parent it does not hold is dropped.
    assert_eq!(
        ix.store(1, Some(e[1]), &e[2..], &[3, 4]),
        Err(RunError::UnknownParent)
    );
    assert_eq!(
        ix.store(0, Some(12345), &e[2..], &[3, 4]),
        Err(RunError::UnknownParent)
    );
    assert_eq!(
        ix.store(0, Some(e[1]), &e[2..], &[3]),
        Err(RunError::LengthMismatch),
        "a content hash per block, or nothing is stored"
    );
    // Unit 1 extends a chain it holds into blocks unit 0 has.
    store(&mut ix, 1, &[1]);
    ix.store(1, Some(e[0]), &e[1..3], &[2, 3]).expect("extend");
    assert_eq!(found(&mut ix, &[1, 2, 3, 4]), vec![(0, 4), (1, 3)]);
}

#[test]
fn branch_splits_the_run() {
    let mut ix = RunIndex::new();
    store(&mut ix, 0, &[1, 2, 3, 4]);
    store(&mut ix, 1, &[1, 2, 7, 8, 9]);
    assert_eq!(ix.runs(), 3);
    assert_eq!(found(&mut ix, &[1, 2, 3, 4]), vec![(0, 4), (1, 2)]);
    assert_eq!(found(&mut ix, &[1, 2, 7, 8]), vec![(0, 2), (1, 4)]);
    assert_eq!(found(&mut ix, &[1, 2]), vec![(0, 2), (1, 2)]);
    store(&mut ix, 2, &[1, 2, 3, 4, 5]);
    assert_eq!(
        found(&mut ix, &[1, 2, 3, 4, 5]),
        vec![(0, 4), (1, 2), (2, 5)]
    );
    // A different first block is another root run.
    store(&mut ix, 0, &[5, 6]);
    assert_eq!(found(&mut ix, &[5, 6]), vec![(0, 2)]);
}

#[test]
fn remove_suffix_and_reclaim() {
    let mut ix = RunIndex::new();
    store(&mut ix, 0, &[1, 2, 3, 4]);
    store(&mut ix, 1, &[1, 2]);
    let e = engines(&[1, 2, 3, 4]);
    ix.remove(0, &e[2..]);
    assert_eq!(found(&mut ix, &[1, 2, 3, 4]), vec![(0, 2), (1, 2)]);
    assert_eq!(ix.distinct_blocks(), 2);
    ix.remove(0, &[999]);
    ix.remove(1, &e);
    assert_eq!(found(&mut ix, &[1, 2, 3, 4]), vec![(0, 2)]);
    ix.remove(0, &e);
    assert_eq!(found(&mut ix, &[1, 2, 3, 4]), vec![]);
    assert_eq!(ix.distinct_blocks(), 0);
    assert_eq!(ix.runs(), 0);
    // Usable again afterwards.
    store(&mut ix, 3, &[1, 2, 3]);
    assert_eq!(found(&mut ix, &[1, 2, 3, 4]), vec![(3, 3)]);
}

#[test]
fn hole_stops_depth_and_refill_restores_it() {
    let mut ix = RunIndex::new();
    let c = [1, 2, 3, 4, 5, 6];
    let e = engines(&c);
    store(&mut ix, 0, &c);
    store(&mut ix, 1, &c);
    ix.remove(0, &[e[2], e[4]]);
    assert_eq!(found(&mut ix, &c), vec![(0, 2), (1, 6)]);
    // Unit 0 still holds block 3 (engine e[3]): a store under it is accepted.
    ix.store(0, Some(e[3]), &e[4..], &c[4..])
        .expect("parent held");
    assert_eq!(found(&mut ix, &c), vec![(0, 2), (1, 6)]);
    // Filling the hole back gives the full depth again.
    ix.store(0, Some(e[1]), &e[2..3], &c[2..3]).expect("refill");
    assert_eq!(found(&mut ix, &c), vec![(0, 6), (1, 6)]);
    // A hole at the very first block.
    ix.remove(1, &e[..1]);
    assert_eq!(found(&mut ix, &c), vec![(0, 6)]);
    ix.remove(0, &e);
    assert_eq!(found(&mut ix, &c), vec![]);
    ix.remove(1, &e);
    assert_eq!(ix.distinct_blocks(), 0);
}

#[test]
fn removal_in_chain_order_takes_everything() {
    let mut ix = RunIndex::new();
    let c: Vec<u64> = (1..=50).collect();
    let e = engines(&c);
    store(&mut ix, 0, &c);
    store(&mut ix, 1, &c[..30]);
    ix.remove(0, &e);
    assert_eq!(found(&mut ix, &c), vec![(1, 30)]);
    assert_eq!(ix.distinct_blocks(), 30);
}

#[test]
fn clear_one_unit() {
    let mut ix = RunIndex::new();
    store(&mut ix, 0, &[1, 2, 3, 4]);
    store(&mut ix, 1, &[1, 2, 7]);
    store(&mut ix, 0, &[9]);
    ix.clear(0);
    assert_eq!(found(&mut ix, &[1, 2, 3, 4]), vec![(1, 2)]);
    assert_eq!(found(&mut ix, &[9]), vec![]);
    assert_eq!(ix.distinct_blocks(), 3);
    ix.clear(1);
    assert_eq!(ix.distinct_blocks(), 0);
    assert_eq!(ix.runs(), 0);
}

#[test]
fn conflicting_engine_hash_is_reported() {
    let mut ix = RunIndex::new();
    store(&mut ix, 0, &[1, 2]);
    // Same contents, other engine hashes: the tree has content 1 under another name.
    assert_eq!(
        ix.store(1, None, &[77, 78], &[1, 2]),
        Err(RunError::Conflict)
    );
    // A known engine hash reused for a new block.
    let e = engines(&[1, 2]);
    assert_eq!(ix.store(1, None, &[e[0]], &[5]), Err(RunError::Conflict));
    assert_eq!(found(&mut ix, &[1, 2]), vec![(0, 2)]);
}

#[test]
fn compaction_keeps_answers() {
    let mut ix = RunIndex::new();
    let mut chains = Vec::new();
    for i in 0..200u64 {
        let c: Vec<u64> = (0..60).map(|j| i * 1000 + j).collect();
        store(&mut ix, (i % 7) as u32, &c);
        chains.push(c);
    }
    for (i, c) in chains.iter().enumerate() {
        if i % 4 != 0 {
            ix.remove((i % 7) as u32, &engines(c)[10..]);
        }
    }
    for (i, c) in chains.iter().enumerate() {
        let want = if i % 4 == 0 { 60 } else { 10 };
        assert_eq!(found(&mut ix, c), vec![((i % 7) as u32, want)]);
    }
    assert!(ix.memory_bytes() > 0);
}

#[test]
fn long_chains_span_chunks() {
    use super::slab::CHUNK;
    let mut ix = RunIndex::new();
    let n = (CHUNK as usize) * 5 / 2;
    let c: Vec<u64> = (1..=n as u64).collect();
    let e = engines(&c);
    ix.store(0, None, &e, &c).expect("store");
    assert_eq!(found(&mut ix, &c), vec![(0, n as u32)]);
    // Fill most of the last chunk, so the next store does not fit in it.
    let d: Vec<u64> = (0..(CHUNK as u64) / 3).map(|i| 1 << 40 | i).collect();
    store(&mut ix, 1, &d);
    let f: Vec<u64> = (0..(CHUNK as u64) / 2).map(|i| 2 << 40 | i).collect();
    store(&mut ix, 1, &f);
    assert_eq!(found(&mut ix, &f), vec![(1, f.len() as u32)]);
    assert_eq!(found(&mut ix, &d), vec![(1, d.len() as u32)]);
    // Another unit takes a prefix crossing a chunk boundary, then extends it by parent.
    let k = CHUNK as usize + 10;
    ix.store(2, None, &e[..k], &c[..k]).expect("prefix");
    ix.store(2, Some(e[k - 1]), &e[k..k + 5], &c[k..k + 5])
        .expect("extend");
    assert_eq!(found(&mut ix, &c), vec![(0, n as u32), (2, k as u32 + 5)]);
    // Leaf-first eviction of the long chain on unit 0, then everything.
    ix.remove(0, &e[n / 2..]);
    assert_eq!(
        found(&mut ix, &c),
        vec![(0, n as u32 / 2), (2, k as u32 + 5)]
    );
    ix.clear(0);
    ix.clear(2);
    assert_eq!(found(&mut ix, &c), vec![]);
    assert_eq!(ix.distinct_blocks(), d.len() + f.len());
    ix.clear(1);
    assert_eq!(ix.distinct_blocks(), 0);
}
