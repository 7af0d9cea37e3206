//! Unit tests of the residency through `KvIndex` (content paths as in the run index
//! prototype's tests): store, extend, branch, split, remove, holes, clear, find, engine
//! hashes that disagree or move.

use super::super::diff_tests::Ix;
use crate::index::IndexError;

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

fn found(ix: &Ix, q: &[u64]) -> Vec<(u32, u32)> {
    ix.find(q)
}

fn store(ix: &Ix, unit: u32, c: &[u64]) {
    ix.store(unit, None, &engines(c), c).expect("store");
}

#[test]
fn store_and_find_one_chain() {
    let ix = Ix::new();
    store(&ix, 0, &[1, 2, 3, 4]);
    assert_eq!(found(&ix, &[1, 2, 3, 4]), vec![(0, 4)]);
    assert_eq!(found(&ix, &[1, 2, 9]), vec![(0, 2)]);
    assert_eq!(found(&ix, &[1, 2, 3, 4, 5]), vec![(0, 4)]);
    assert_eq!(found(&ix, &[2]), vec![]);
    assert_eq!(found(&ix, &[]), vec![]);
    assert_eq!(ix.runs(), 1);
    assert_eq!(ix.distinct_blocks(), 4);
}

#[test]
fn second_unit_shares_the_run() {
    let ix = Ix::new();
    store(&ix, 0, &[1, 2, 3, 4]);
    store(&ix, 1, &[1, 2]);
    assert_eq!(ix.runs(), 1);
    assert_eq!(ix.distinct_blocks(), 4);
    assert_eq!(found(&ix, &[1, 2, 3, 4]), vec![(0, 4), (1, 2)]);
    // Re-storing is a no-op.
    store(&ix, 1, &[1, 2]);
    store(&ix, 0, &[1, 2, 3]);
    assert_eq!(found(&ix, &[1, 2, 3, 4]), vec![(0, 4), (1, 2)]);
}

#[test]
fn extend_with_parent() {
    let ix = Ix::new();
    store(&ix, 0, &[1, 2]);
    let e = engines(&[1, 2, 3, 4]);
    ix.store(0, Some(e[1]), &e[2..], &[3, 4]).expect("extend");
    assert_eq!(ix.runs(), 1, "the unit's own last run grows in place");
    assert_eq!(found(&ix, &[1, 2, 3, 4]), vec![(0, 4)]);
    // Another unit extending from a parent it does not hold is dropped.
    assert!(matches!(
        ix.store(1, Some(e[1]), &e[2..], &[3, 4]),
        Err(IndexError::UnknownParent { .. })
    ));
    assert!(matches!(
        ix.store(0, Some(12345), &e[2..], &[3, 4]),
        Err(IndexError::UnknownParent { .. })
    ));
    assert!(
        matches!(
            ix.store(0, Some(e[1]), &e[2..], &[3]),
            Err(IndexError::HashCountMismatch { .. })
        ),
        "a content hash per block, or nothing is stored"
    );
    // Unit 1 extends a chain it holds into blocks unit 0 has.
    store(&ix, 1, &[1]);
    ix.store(1, Some(e[0]), &e[1..3], &[2, 3]).expect("extend");
    assert_eq!(found(&ix, &[1, 2, 3, 4]), vec![(0, 4), (1, 3)]);
}

#[test]
fn branch_splits_the_run() {
    let ix = Ix::new();
    store(&ix, 0, &[1, 2, 3, 4]);
    store(&ix, 1, &[1, 2, 7, 8, 9]);
    assert_eq!(ix.runs(), 3);
    assert_eq!(found(&ix, &[1, 2, 3, 4]), vec![(0, 4), (1, 2)]);
    assert_eq!(found(&ix, &[1, 2, 7, 8]), vec![(0, 2), (1, 4)]);
    assert_eq!(found(&ix, &[1, 2]), vec![(0, 2), (1, 2)]);
    store(&ix, 2, &[1, 2, 3, 4, 5]);
    assert_eq!(found(&ix, &[1, 2, 3, 4, 5]), vec![(0, 4), (1, 2), (2, 5)]);
    // A different first block is another root run.
    store(&ix, 0, &[5, 6]);
    assert_eq!(found(&ix, &[5, 6]), vec![(0, 2)]);
}

#[test]
fn remove_suffix_and_reclaim() {
    let ix = Ix::new();
    store(&ix, 0, &[1, 2, 3, 4]);
    store(&ix, 1, &[1, 2]);
    let e = engines(&[1, 2, 3, 4]);
    ix.remove(0, &e[2..]);
    assert_eq!(found(&ix, &[1, 2, 3, 4]), vec![(0, 2), (1, 2)]);
    assert_eq!(ix.distinct_blocks(), 2);
    ix.remove(0, &[999]);
    ix.remove(1, &e);
    assert_eq!(found(&ix, &[1, 2, 3, 4]), vec![(0, 2)]);
    ix.remove(0, &e);
    assert_eq!(found(&ix, &[1, 2, 3, 4]), vec![]);
    assert_eq!(ix.distinct_blocks(), 0);
    assert_eq!(ix.runs(), 0);
    // Usable again afterwards.
    store(&ix, 3, &[1, 2, 3]);
    assert_eq!(found(&ix, &[1, 2, 3, 4]), vec![(3, 3)]);
}

#[test]
fn hole_stops_depth_and_refill_restores_it() {
    let ix = Ix::new();
    let c = [1, 2, 3, 4, 5, 6];
    let e = engines(&c);
    store(&ix, 0, &c);
    store(&ix, 1, &c);
    ix.remove(0, &[e[2], e[4]]);
    assert_eq!(found(&ix, &c), vec![(0, 2), (1, 6)]);
    // Unit 0 still holds block 3 (engine e[3]): a store under it is accepted.
    ix.store(0, Some(e[3]), &e[4..], &c[4..])
        .expect("parent held");
    assert_eq!(found(&ix, &c), vec![(0, 2), (1, 6)]);
    // Filling the hole back gives the full depth again.
    ix.store(0, Some(e[1]), &e[2..3], &c[2..3]).expect("refill");
    assert_eq!(found(&ix, &c), vec![(0, 6), (1, 6)]);
    // A hole at the very first block.
    ix.remove(1, &e[..1]);
    assert_eq!(found(&ix, &c), vec![(0, 6)]);
    ix.remove(0, &e);
    assert_eq!(found(&ix, &c), vec![]);
    ix.remove(1, &e);
    assert_eq!(ix.distinct_blocks(), 0);
}

#[test]
fn removal_in_chain_order_takes_everything() {
    let ix = Ix::new();
    let c: Vec<u64> = (1..=50).collect();
    let e = engines(&c);
    store(&ix, 0, &c);
    store(&ix, 1, &c[..30]);
    ix.remove(0, &e);
    assert_eq!(found(&ix, &c), vec![(1, 30)]);
    assert_eq!(ix.distinct_blocks(), 30);
}

#[test]
fn clear_one_unit() {
    let ix = Ix::new();
    store(&ix, 0, &[1, 2, 3, 4]);
    store(&ix, 1, &[1, 2, 7]);
    store(&ix, 0, &[9]);
    ix.clear(0);
    assert_eq!(found(&ix, &[1, 2, 3, 4]), vec![(1, 2)]);
    assert_eq!(found(&ix, &[9]), vec![]);
    assert_eq!(ix.distinct_blocks(), 3);
    ix.clear(1);
    assert_eq!(ix.distinct_blocks(), 0);
    assert_eq!(ix.runs(), 0);
}

#[test]
fn units_that_disagree_on_engine_hashes_share_blocks_by_key() {
    let ix = Ix::new();
    store(&ix, 0, &[1, 2]);
    // Same contents, other engine hashes: the same blocks, named per unit.
    let got = ix.store(1, None, &[77, 78], &[1, 2]).expect("aliases");
    assert_eq!(got.stored, 2);
    assert_eq!(ix.runs(), 1);
    assert_eq!(ix.distinct_blocks(), 2);
    assert_eq!(found(&ix, &[1, 2]), vec![(0, 2), (1, 2)]);
    // Each unit's names remove only its own holding.
    let e = engines(&[1, 2]);
    assert_eq!(ix.remove(1, &e).removed, 0);
    assert_eq!(ix.remove(0, &[78]).removed, 0);
    assert_eq!(ix.remove(1, &[78]).removed, 1);
    assert_eq!(found(&ix, &[1, 2]), vec![(0, 2), (1, 1)]);
    // A name another unit uses for another block: unit 1's alias for a new block.
    ix.store(1, None, &[e[0]], &[5])
        .expect("alias of a new block");
    assert_eq!(found(&ix, &[5]), vec![(1, 1)]);
    assert_eq!(ix.remove(1, &[e[0]]).removed, 1);
    assert_eq!(found(&ix, &[5]), vec![]);
    assert_eq!(found(&ix, &[1, 2]), vec![(0, 2), (1, 1)]);
}

#[test]
fn a_known_engine_hash_with_new_content_moves_to_the_new_block() {
    let ix = Ix::new();
    store(&ix, 0, &[1, 2]);
    let e = engines(&[1, 2]);
    let got = ix.store(0, None, &[e[1]], &[6]).expect("moved");
    assert_eq!((got.stored, got.unchanged), (1, 0));
    assert_eq!(found(&ix, &[1, 2]), vec![(0, 1)]);
    assert_eq!(found(&ix, &[6]), vec![(0, 1)]);
    assert_eq!(ix.0.unit_blocks(crate::WorkerId(0), 0), 2);
    // The name now removes the new block.
    assert_eq!(ix.remove(0, &[e[1]]).removed, 1);
    assert_eq!(found(&ix, &[6]), vec![]);
    assert_eq!(found(&ix, &[1, 2]), vec![(0, 1)]);
    assert_eq!(ix.0.resident_blocks(), 1);
}

#[test]
fn mass_removal_keeps_answers() {
    let ix = Ix::new();
    let mut chains = Vec::new();
    for i in 0..200u64 {
        let c: Vec<u64> = (0..60).map(|j| i * 1000 + j).collect();
        store(&ix, (i % 7) as u32, &c);
        chains.push(c);
    }
    for (i, c) in chains.iter().enumerate() {
        if i % 4 != 0 {
            ix.remove((i % 7) as u32, &engines(c)[10..]);
        }
    }
    for (i, c) in chains.iter().enumerate() {
        let want = if i % 4 == 0 { 60 } else { 10 };
        assert_eq!(found(&ix, c), vec![((i % 7) as u32, want)]);
    }
    assert!(ix.0.memory_bytes() > 0);
}

#[test]
fn an_engine_hash_equal_to_the_no_name_marker_is_an_alias() {
    use super::slab::NO_NAME;
    let ix = Ix::new();
    store(&ix, 0, &[1]);
    // Unit 1 names block [5] with unit 0's name of [1]: [5] gets no canonical name.
    let taken = engines(&[1])[0];
    ix.store(1, None, &[taken], &[5]).expect("alias");
    // Unit 2 sends the marker itself as an engine hash: a name like any other.
    let got = ix
        .store(2, None, &[NO_NAME], &[5])
        .expect("marker as a name");
    assert_eq!(got.stored, 1);
    assert_eq!(found(&ix, &[5]), vec![(1, 1), (2, 1)]);
    assert_eq!(ix.remove(2, &[NO_NAME]).removed, 1);
    assert_eq!(found(&ix, &[5]), vec![(1, 1)]);
    assert_eq!(ix.remove(1, &[taken]).removed, 1);
    assert_eq!(found(&ix, &[5]), vec![]);
    assert_eq!(found(&ix, &[1]), vec![(0, 1)]);
}

#[test]
fn finds_name_each_indexs_own_units_on_one_thread() {
    // Dense index 0 is worker 5 in one index and worker 7 in the other; a thread's find
    // scratch caches dense -> unit per index and must not carry one index's over.
    let (a, b) = (Ix::new(), Ix::new());
    store(&a, 5, &[1, 2, 3]);
    store(&a, 7, &[1, 2]);
    store(&b, 7, &[1, 2, 3]);
    store(&b, 5, &[1]);
    for _ in 0..2 {
        assert_eq!(found(&a, &[1, 2, 3]), vec![(5, 3), (7, 2)]);
        assert_eq!(found(&b, &[1, 2, 3]), vec![(5, 1), (7, 3)]);
    }
}

#[test]
fn a_query_leaving_a_run_midway_stops_there() {
    // One run of 40 blocks; queries that diverge at every position inside it (the
    // last-key shortcut does not apply, the key-by-key compare must find the point).
    let ix = Ix::new();
    let c: Vec<u64> = (1..=40).collect();
    store(&ix, 0, &c);
    assert_eq!(ix.runs(), 1);
    for k in 0..40 {
        let mut q = c.clone();
        q[k] = 1000 + k as u64;
        let want = if k == 0 { vec![] } else { vec![(0, k as u32)] };
        assert_eq!(found(&ix, &q), want, "diverging at {k}");
        assert_eq!(found(&ix, &q[..k]), want, "ending at {k}");
    }
}
