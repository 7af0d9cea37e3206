//! Differential test: `KvIndex` against a naive model (per block path, the set of units
//! holding it) over random fleets, chains from a small content alphabet (shared and
//! branching prefixes), stores under held, unknown and foreign parents, leaf-first removals
//! with some holes, unknown removals, and clears. The index must equal the model after every
//! step, holes included (a hole stops a unit's depth), and reclaim everything at the end.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Applied, IndexError, KvEvent, KvIndex};
use crate::tokens::chain;
use crate::WorkerId;

pub(super) type Path = Vec<u64>;

pub(super) fn eh(parent: u64, content: u64) -> u64 {
    (parent ^ content.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .rotate_left(17)
        .wrapping_mul(0xBF58_476D_1CE4_E5B9)
        ^ 0x5EED
}

pub(super) fn engine_of(p: &[u64]) -> u64 {
    p.iter().fold(0, |acc, &c| eh(acc, c))
}

/// The engine hashes of `contents` stored as one chain from the root.
pub(super) fn chain_of(contents: &[u64]) -> Vec<u64> {
    let mut p = 0;
    contents
        .iter()
        .map(|&x| {
            p = eh(p, x);
            p
        })
        .collect()
}

/// What a removal of `pick` evicts: with `subtree`, the block and everything the unit holds
/// below it (leaf-first eviction); otherwise `pick` alone (a hole, or a leaf).
pub(super) fn removal(held: &[Path], pick: Path, subtree: bool) -> Vec<Path> {
    if subtree {
        held.iter()
            .filter(|p| p.starts_with(&pick))
            .cloned()
            .collect()
    } else {
        vec![pick]
    }
}

/// A store of `tail` under `parent_path`: the tail's engine hashes and the parent's.
pub(super) fn store_along(parent_path: &[u64], tail: &[u64]) -> (Vec<u64>, Option<u64>) {
    let mut path = parent_path.to_vec();
    let mut engines = Vec::with_capacity(tail.len());
    for &c in tail {
        path.push(c);
        engines.push(engine_of(&path));
    }
    let parent = (!parent_path.is_empty()).then(|| engine_of(parent_path));
    (engines, parent)
}

pub(super) fn seqs_of(p: &[u64]) -> Vec<u64> {
    let mut out = Vec::with_capacity(p.len());
    for (i, &c) in p.iter().enumerate() {
        out.push(if i == 0 { c } else { chain(out[i - 1], c) });
    }
    out
}

#[derive(Default)]
pub(super) struct Model {
    /// Block path -> units holding it.
    pub(super) holders: HashMap<Path, BTreeSet<u32>>,
    /// Every engine hash ever stored -> its path.
    pub(super) by_engine: HashMap<u64, Path>,
}

impl Model {
    /// `u` no longer holds the blocks at `paths`.
    pub(super) fn evict(&mut self, u: u32, paths: &[Path]) {
        for p in paths {
            if let Some(s) = self.holders.get_mut(p) {
                s.remove(&u);
                if s.is_empty() {
                    self.holders.remove(p);
                }
            }
        }
    }

    /// `u` holds nothing.
    pub(super) fn clear(&mut self, u: u32) {
        self.holders.retain(|_, s| {
            s.remove(&u);
            !s.is_empty()
        });
    }

    fn holds(&self, u: u32, p: &[u64]) -> bool {
        self.holders.get(p).is_some_and(|s| s.contains(&u))
    }

    pub(super) fn held_by(&self, u: u32) -> Vec<Path> {
        let mut v: Vec<Path> = self
            .holders
            .iter()
            .filter(|(_, s)| s.contains(&u))
            .map(|(p, _)| p.clone())
            .collect();
        v.sort();
        v
    }

    pub(super) fn find(&self, q: &[u64]) -> Vec<(u32, u32)> {
        let mut depth: BTreeMap<u32, u32> = BTreeMap::new();
        let mut alive: BTreeSet<u32> = BTreeSet::new();
        for d in 1..=q.len() {
            let Some(s) = self.holders.get(&q[..d]) else {
                break;
            };
            if d == 1 {
                alive = s.clone();
            } else {
                alive.retain(|u| s.contains(u));
            }
            if alive.is_empty() {
                break;
            }
            for &u in &alive {
                depth.insert(u, d as u32);
            }
        }
        depth.into_iter().collect()
    }
}

/// A [`KvIndex`] driven the way the run index prototype was: per-page content hashes and
/// engine hashes, units as workers (rank 0), finds by content path.
pub(super) struct Ix(pub(super) KvIndex);

impl Ix {
    pub(super) fn new() -> Self {
        Ix(KvIndex::new(16))
    }

    pub(super) fn store(
        &self,
        u: u32,
        parent: Option<u64>,
        e: &[u64],
        c: &[u64],
    ) -> Result<Applied, IndexError> {
        self.0.apply(
            WorkerId(u),
            0,
            &KvEvent::StoredHashed {
                parent,
                block_hashes: e.to_vec(),
                local_hashes: c.to_vec(),
            },
        )
    }

    pub(super) fn remove(&self, u: u32, e: &[u64]) -> Applied {
        self.0
            .apply(
                WorkerId(u),
                0,
                &KvEvent::Removed {
                    block_hashes: e.to_vec(),
                },
            )
            .expect("removal applies")
    }

    pub(super) fn clear(&self, u: u32) {
        self.0
            .apply(WorkerId(u), 0, &KvEvent::Cleared)
            .expect("clear applies");
    }

    /// `(unit, depth)` of the content path `c`, sorted.
    pub(super) fn find(&self, c: &[u64]) -> Vec<(u32, u32)> {
        let mut v: Vec<(u32, u32)> = self
            .0
            .find_matches(&seqs_of(c))
            .units
            .iter()
            .map(|o| (o.unit.worker.0, o.confirmed))
            .collect();
        v.sort_unstable();
        v
    }

    pub(super) fn distinct_blocks(&self) -> usize {
        self.0.distinct_blocks()
    }

    pub(super) fn slab_live(&self) -> usize {
        self.0.residency().slab_live()
    }

    pub(super) fn runs(&self) -> usize {
        self.0.residency().runs()
    }

    pub(super) fn slab_chunks(&self) -> usize {
        self.0.residency().slab_chunks()
    }
}

pub(super) fn random_contents(rng: &mut StdRng, alphabet: u64, max: usize) -> Vec<u64> {
    let n = rng.random_range(1..=max);
    (0..n).map(|_| rng.random_range(1..=alphabet)).collect()
}

fn check(ix: &Ix, model: &Model, queries: &[Path], ctx: &str) {
    for q in queries {
        assert_eq!(
            ix.find(q),
            model.find(q),
            "KvIndex vs model, query {q:?} ({ctx})"
        );
    }
}

fn run_seed(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let fleet: u32 = rng.random_range(1..=40);
    let alphabet = rng.random_range(2..=5);
    let steps = 120;
    let ix = Ix::new();
    let mut model = Model::default();
    for step in 0..steps {
        let u = rng.random_range(0..fleet);
        let held = model.held_by(u);
        let roll = rng.random_range(0..100);
        let ctx = format!("seed {seed}, step {step}, unit {u}, roll {roll}");
        if roll < 55 {
            // Store: from the root, under a held block, or under one the unit lacks.
            let (parent_path, expect_ok): (Path, bool) = if held.is_empty() || roll < 25 {
                (Vec::new(), true)
            } else if roll < 50 {
                (held[rng.random_range(0..held.len())].clone(), true)
            } else {
                let known: Vec<&Path> = model.by_engine.values().collect();
                let p = if known.is_empty() || rng.random_bool(0.3) {
                    vec![99, 98]
                } else {
                    known[rng.random_range(0..known.len())].clone()
                };
                let ok = model.holds(u, &p);
                (p, ok)
            };
            let tail = random_contents(&mut rng, alphabet, 8);
            let (engines, parent) = store_along(&parent_path, &tail);
            let got = ix.store(u, parent, &engines, &tail);
            if !expect_ok {
                assert!(
                    matches!(got, Err(IndexError::UnknownParent { .. })),
                    "store ({ctx}): {got:?}"
                );
            } else {
                got.expect("store with a held parent");
                let mut p = parent_path;
                for (&c, &e) in tail.iter().zip(&engines) {
                    p.push(c);
                    model.by_engine.insert(e, p.clone());
                    model.holders.entry(p.clone()).or_default().insert(u);
                }
            }
        } else if roll < 93 {
            if held.is_empty() {
                continue;
            }
            let pick = held[rng.random_range(0..held.len())].clone();
            let mut gone = removal(&held, pick, roll < 85);
            match rng.random_range(0..3) {
                0 => gone.sort_by_key(|p| std::cmp::Reverse(p.len())),
                1 => gone.sort_by_key(Vec::len),
                _ => {}
            }
            let mut engines: Vec<u64> = gone.iter().map(|p| engine_of(p)).collect();
            if rng.random_bool(0.2) {
                engines.push(0xDEAD_BEEF);
            }
            let applied = ix.remove(u, &engines);
            assert_eq!(applied.removed, gone.len(), "removed ({ctx})");
            model.evict(u, &gone);
        } else {
            ix.clear(u);
            model.clear(u);
        }
        // Queries: known paths, their extensions, and random sequences.
        let mut queries: Vec<Path> = Vec::new();
        let known: Vec<&Path> = model.holders.keys().collect();
        for _ in 0..6 {
            if known.is_empty() {
                break;
            }
            let mut q = known[rng.random_range(0..known.len())].clone();
            if rng.random_bool(0.5) {
                q.extend(random_contents(&mut rng, alphabet, 4));
            }
            queries.push(q);
        }
        for _ in 0..3 {
            queries.push(random_contents(&mut rng, alphabet, 12));
        }
        check(&ix, &model, &queries, &ctx);
        assert_eq!(
            ix.distinct_blocks(),
            model.holders.len(),
            "distinct blocks ({ctx})"
        );
        // Unheld positions stay while they lead to held ones (a hole every unit has).
        assert!(ix.slab_live() >= model.holders.len(), "slab ({ctx})");
    }
    // Everything cleared: every block reclaimed.
    for u in 0..fleet {
        if rng.random_bool(0.5) {
            ix.clear(u);
        } else {
            let engines: Vec<u64> = model.held_by(u).iter().map(|p| engine_of(p)).collect();
            ix.remove(u, &engines);
        }
    }
    assert_eq!(ix.distinct_blocks(), 0, "seed {seed}: nothing held");
    assert_eq!(ix.slab_live(), 0, "seed {seed}: all reclaimed");
    assert_eq!(ix.runs(), 0, "seed {seed}: no runs left");
    assert_eq!(ix.0.resident_blocks(), 0, "seed {seed}: no entries left");
}

#[test]
fn matches_the_model_holes_included() {
    for seed in 0..150 {
        run_seed(seed);
    }
}
