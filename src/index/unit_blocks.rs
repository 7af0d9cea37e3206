//! One unit's own view of its resident blocks: engine hash -> router sequence
//! hash, used for removals and parent lookup. When an engine already sends the
//! router's sequence hashes (Dynamo-format events, kvrouter's own relay) the
//! mapping is the identity and only the hash is kept.

use std::collections::{HashMap, HashSet};

use super::block_map::table_bytes;
use super::event::EngineHash;
use super::hashers::MulBuild;
use crate::tokens::SeqHash;

#[derive(Default)]
pub(crate) struct UnitBlocks {
    /// Set once the unit was removed; late events on a stale handle are ignored.
    pub(crate) removed: bool,
    mapped: HashMap<EngineHash, SeqHash, MulBuild>,
    identity: HashSet<SeqHash, MulBuild>,
}

impl UnitBlocks {
    pub(crate) fn lookup(&self, engine: EngineHash) -> Option<SeqHash> {
        if let Some(seq) = self.mapped.get(&engine) {
            return Some(*seq);
        }
        self.identity.contains(&engine).then_some(engine)
    }

    /// Records `engine -> seq` (a re-store of a known engine hash with other
    /// content replaces its old sequence hash).
    pub(crate) fn insert(&mut self, engine: EngineHash, seq: SeqHash) -> Insert {
        match self.lookup(engine) {
            Some(old) if old == seq => Insert::Present,
            Some(old) => {
                self.forget(engine);
                self.put(engine, seq);
                Insert::Replaced(old)
            }
            None => {
                self.put(engine, seq);
                Insert::New
            }
        }
    }

    fn put(&mut self, engine: EngineHash, seq: SeqHash) {
        if engine == seq {
            self.identity.insert(seq);
        } else {
            self.mapped.insert(engine, seq);
        }
    }

    /// Forgets `engine`; returns its sequence hash if it was resident.
    pub(crate) fn remove(&mut self, engine: EngineHash) -> Option<SeqHash> {
        let seq = self.forget(engine)?;
        shrink(&mut self.mapped);
        if self.identity.len() * 4 < self.identity.capacity() {
            self.identity.shrink_to(self.identity.len() * 2);
        }
        Some(seq)
    }

    fn forget(&mut self, engine: EngineHash) -> Option<SeqHash> {
        if let Some(seq) = self.mapped.remove(&engine) {
            return Some(seq);
        }
        self.identity.remove(&engine).then_some(engine)
    }

    /// Removes everything, returning the sequence hashes that were resident.
    pub(crate) fn drain(&mut self) -> Vec<SeqHash> {
        let mut out: Vec<SeqHash> = self.mapped.drain().map(|(_, s)| s).collect();
        out.extend(self.identity.drain());
        self.mapped = HashMap::default();
        self.identity = HashSet::default();
        out
    }

    pub(crate) fn len(&self) -> usize {
        self.mapped.len() + self.identity.len()
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        table_bytes(self.mapped.capacity(), 16) + table_bytes(self.identity.capacity(), 8)
    }
}

fn shrink<V>(map: &mut HashMap<EngineHash, V, MulBuild>) {
    let (len, cap) = (map.len(), map.capacity());
    if len * 4 < cap {
        map.shrink_to(len * 2);
    }
}

/// Outcome of [`UnitBlocks::insert`].
pub(crate) enum Insert {
    Present,
    New,
    Replaced(SeqHash),
}
