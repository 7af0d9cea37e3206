//! TEMPORARY losing candidate kept only for the design bench: a DashMap
//! SeqHash -> Vec<UnitId> with a linear find walk (one lookup per block).

use std::collections::HashMap;

use dashmap::DashMap;
use parking_lot::Mutex;

use super::event::KvEvent;
use super::unit::{Unit, UnitId};
use crate::tokens::{local_hash, next_seq, SeqHash};
use crate::workers::{Rank, WorkerId};

#[doc(hidden)]
#[derive(Default)]
pub struct DashIndex {
    map: DashMap<SeqHash, Vec<UnitId>>,
    units: DashMap<UnitId, Mutex<HashMap<u64, SeqHash>>>,
}

impl DashIndex {
    pub fn apply(&self, worker: WorkerId, rank: Rank, ev: &KvEvent) {
        let id = Unit::new(worker, rank).id().expect("in range");
        let unit = self.units.entry(id).or_default();
        let mut unit = unit.lock();
        match ev {
            KvEvent::Stored {
                parent,
                block_hashes,
                token_ids,
                block_size,
            } => {
                let mut prev = match parent {
                    None => None,
                    Some(p) => match unit.get(p) {
                        Some(s) => Some(*s),
                        None => return,
                    },
                };
                for (e, page) in block_hashes
                    .iter()
                    .zip(token_ids.chunks_exact(*block_size as usize))
                {
                    let seq = next_seq(prev, local_hash(page));
                    prev = Some(seq);
                    if unit.insert(*e, seq).is_none() {
                        let mut set = self.map.entry(seq).or_default();
                        if let Err(i) = set.binary_search(&id) {
                            set.insert(i, id);
                        }
                    }
                }
            }
            KvEvent::Removed { block_hashes } => {
                for e in block_hashes {
                    if let Some(seq) = unit.remove(e) {
                        self.map.remove_if_mut(&seq, |_, set| {
                            if let Ok(i) = set.binary_search(&id) {
                                set.remove(i);
                            }
                            set.is_empty()
                        });
                    }
                }
            }
            KvEvent::Cleared => {}
        }
    }

    pub fn find_matches(&self, seqs: &[SeqHash]) -> Vec<(Unit, u32)> {
        let mut out = Vec::new();
        let Some(first) = seqs.first().and_then(|s| self.map.get(s)) else {
            return out;
        };
        let mut active: Vec<UnitId> = first.clone();
        drop(first);
        let mut end = seqs.len() as u32;
        for (depth, seq) in seqs.iter().enumerate().skip(1) {
            let Some(set) = self.map.get(seq) else {
                end = depth as u32;
                break;
            };
            if set.len() == active.len() {
                continue;
            }
            active.retain(|u| {
                let keep = set.binary_search(u).is_ok();
                if !keep {
                    out.push((Unit::from_id(*u), depth as u32));
                }
                keep
            });
            if active.is_empty() {
                return out;
            }
        }
        out.extend(active.iter().map(|u| (Unit::from_id(*u), end)));
        out
    }
}
