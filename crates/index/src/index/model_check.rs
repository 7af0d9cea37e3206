//! Randomized model check: the index against a naive reference (per unit, a
//! plain map engine hash -> sequence hash; depth = leading blocks held) on
//! random event sequences over a small trie of pages, so prefixes are shared
//! across units, stores chain through parents and removals evict leaves first
//! (the prefix-closed world the index's search relies on). Units with opaque engine hashes
//! also hold copies: the same pages under a second family of engine hashes (an engine
//! namespace the events do not name), so one block may be held twice by one unit and a
//! holder must stay until its last copy goes.

use std::collections::{HashMap, HashSet};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::ids::WorkerId;
use crate::tokens::{local_hash, next_seq, SeqHash};

const PAGE: u32 = 2;
const BRANCH: u32 = 3;
const DEPTH: usize = 7;

/// A trie path: page choices from the root.
type Path = Vec<u32>;

fn page_tokens(path: &[u32]) -> [u32; PAGE as usize] {
    let level = path.len() as u32;
    let choice = *path.last().expect("non-empty path");
    [level * 10 + choice, 7 + choice]
}

fn seqs_of(path: &[u32]) -> Vec<SeqHash> {
    let mut prev = None;
    (1..=path.len())
        .map(|i| {
            let s = next_seq(prev, local_hash(&page_tokens(&path[..i])));
            prev = Some(s);
            s
        })
        .collect()
}

/// Whether a unit's engine sends the router's own sequence hashes (identity records).
fn is_identity(unit: (u32, u32)) -> bool {
    unit.0 % 3 == 2
}

/// Copy families of a unit: opaque units hold up to two copies of a block.
fn copies_of(unit: (u32, u32)) -> u64 {
    if is_identity(unit) {
        1
    } else {
        2
    }
}

/// Engine hash of copy `copy` of a block on a unit: opaque per unit and copy (salted), or
/// the router's own sequence hash (identity), depending on the unit.
fn engine_of(unit: (u32, u32), copy: u64, seq: SeqHash) -> u64 {
    if is_identity(unit) {
        seq
    } else {
        (seq ^ u64::from(unit.1 + 1).wrapping_mul(0x9E37_79B9) ^ (copy << 60)).rotate_left(23)
    }
}

#[derive(Default)]
struct Reference {
    /// unit -> engine hash -> seq
    units: HashMap<(u32, u32), HashMap<u64, SeqHash>>,
}

impl Reference {
    /// Whether `unit` holds `seq` under any copy.
    fn holds(&self, unit: (u32, u32), seq: SeqHash) -> bool {
        (0..copies_of(unit)).any(|c| self.holds_copy(unit, c, seq))
    }
    fn holds_copy(&self, unit: (u32, u32), copy: u64, seq: SeqHash) -> bool {
        self.units
            .get(&unit)
            .is_some_and(|m| m.get(&engine_of(unit, copy, seq)) == Some(&seq))
    }
    fn resident(&self) -> usize {
        self.units.values().map(HashMap::len).sum()
    }
    fn distinct(&self) -> usize {
        let all: HashSet<SeqHash> = self
            .units
            .values()
            .flat_map(|m| m.values().copied())
            .collect();
        all.len()
    }
    fn depth(&self, unit: (u32, u32), seqs: &[SeqHash]) -> u32 {
        seqs.iter().take_while(|s| self.holds(unit, **s)).count() as u32
    }
    /// Held leaf paths of `unit` are found by the driver; this lists held seqs.
    fn held(&self, unit: (u32, u32)) -> HashSet<SeqHash> {
        self.units
            .get(&unit)
            .map(|m| m.values().copied().collect())
            .unwrap_or_default()
    }
}

fn random_path(rng: &mut StdRng) -> Path {
    let len = rng.random_range(1..=DEPTH);
    (0..len).map(|_| rng.random_range(0..BRANCH)).collect()
}

/// `steps` random events from `seed`; resident and distinct counts and queries are compared
/// with the reference after every event, per-unit counts too.
fn run(seed: u64, steps: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let idx = KvIndex::new(PAGE);
    let mut reference = Reference::default();
    let units: Vec<(u32, u32)> = (0..6).flat_map(|w| (0..2).map(move |r| (w, r))).collect();
    for step in 0..steps {
        let unit = units[rng.random_range(0..units.len())];
        let (wid, rank) = (WorkerId(unit.0), unit.1);
        match rng.random_range(0..100) {
            // Store a path extension after a held (or absent) parent.
            0..=54 => {
                let path = random_path(&mut rng);
                let seqs = seqs_of(&path);
                let cut = rng.random_range(0..path.len());
                let copy = rng.random_range(0..copies_of(unit));
                let parent_held = cut == 0 || reference.holds_copy(unit, copy, seqs[cut - 1]);
                let parent = (cut > 0).then(|| engine_of(unit, copy, seqs[cut - 1]));
                let mut tokens = Vec::new();
                for i in cut..path.len() {
                    tokens.extend(page_tokens(&path[..=i]));
                }
                let ev = KvEvent::Stored {
                    parent,
                    block_hashes: seqs[cut..]
                        .iter()
                        .map(|s| engine_of(unit, copy, *s))
                        .collect(),
                    token_ids: tokens,
                    block_size: PAGE,
                };
                let got = idx.apply(wid, rank, &ev);
                if parent_held {
                    let applied = got.expect("store with a held parent applies");
                    let m = reference.units.entry(unit).or_default();
                    let mut new = 0;
                    for s in &seqs[cut..] {
                        if m.insert(engine_of(unit, copy, *s), *s).is_none() {
                            new += 1;
                        }
                    }
                    assert_eq!(applied.stored, new, "step {step}");
                    assert_eq!(applied.unchanged, path.len() - cut - new, "step {step}");
                } else {
                    assert!(
                        matches!(got, Err(IndexError::UnknownParent { .. })),
                        "step {step}: {got:?}"
                    );
                }
            }
            // Evict some leaves of the unit (leaf-first, like SGLang's radix cache), or a copy
            // of a block whose other copy stays (the unit still holds it).
            55..=84 => {
                let held = reference.held(unit);
                let mut victims: Vec<(u64, SeqHash)> = Vec::new();
                for _ in 0..rng.random_range(1..=4) {
                    let path = random_path(&mut rng);
                    let seqs = seqs_of(&path);
                    let last = *seqs.last().expect("non-empty");
                    let copy = rng.random_range(0..copies_of(unit));
                    // A leaf: held, and no held child.
                    let is_leaf = held.contains(&last)
                        && (0..BRANCH).all(|c| {
                            let mut child = path.clone();
                            child.push(c);
                            path.len() == DEPTH
                                || !held.contains(seqs_of(&child).last().expect("non-empty"))
                        });
                    let other_copy_stays = (0..copies_of(unit)).any(|c| {
                        c != copy
                            && reference.holds_copy(unit, c, last)
                            && !victims.contains(&(c, last))
                    });
                    let removable = reference.holds_copy(unit, copy, last)
                        && (other_copy_stays || (is_leaf && !victims.iter().any(|v| v.1 == last)));
                    if removable && !victims.contains(&(copy, last)) {
                        victims.push((copy, last));
                    } else if rng.random_bool(0.2) {
                        // Unknown removal: ignored.
                        victims.push((0, rng.random::<u64>() | 1));
                    }
                }
                let ev = KvEvent::Removed {
                    block_hashes: victims
                        .iter()
                        .map(|(c, s)| engine_of(unit, *c, *s))
                        .collect(),
                };
                let applied = idx.apply(wid, rank, &ev).expect("removal applies");
                let m = reference.units.entry(unit).or_default();
                let removed = victims
                    .iter()
                    .filter(|(c, s)| m.remove(&engine_of(unit, *c, *s)).is_some())
                    .count();
                assert_eq!(applied.removed, removed, "step {step}");
            }
            85..=88 => {
                idx.apply(wid, rank, &KvEvent::Cleared)
                    .expect("clear applies");
                reference.units.remove(&unit);
            }
            89..=90 => {
                idx.clear_rank(wid, rank);
                reference.units.remove(&unit);
            }
            91 => {
                idx.remove_worker(wid);
                reference.units.retain(|u, _| u.0 != unit.0);
            }
            _ => {}
        }
        assert_eq!(idx.resident_blocks(), reference.resident(), "step {step}");
        assert_eq!(idx.distinct_blocks(), reference.distinct(), "step {step}");
        // Query a few random paths.
        for _ in 0..3 {
            let q = seqs_of(&random_path(&mut rng));
            let o = idx.find_matches(&q);
            assert_eq!(o.request_blocks as usize, q.len());
            for u in &units {
                let got = o
                    .get(Unit::new(WorkerId(u.0), u.1))
                    .map_or(0, |x| x.confirmed);
                assert_eq!(got, reference.depth(*u, &q), "step {step} unit {u:?}");
            }
            assert!(o.units.iter().all(|x| x.confirmed > 0));
        }
        for u in &units {
            assert_eq!(
                idx.unit_blocks(WorkerId(u.0), u.1),
                reference.units.get(u).map_or(0, HashMap::len),
                "step {step}"
            );
        }
    }
}

#[test]
fn index_equals_a_naive_reference_on_random_events() {
    for seed in 0..12 {
        run(seed, 1500);
    }
}

#[test]
fn long_histories_stay_equal_to_the_reference() {
    for seed in 100..112 {
        run(seed, 3000);
    }
}
