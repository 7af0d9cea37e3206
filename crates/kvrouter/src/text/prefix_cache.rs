//! The per-session tokenization cache: token ids of rendered chat prompts, found again by the
//! longest previously seen prefix that ends right after a boundary (special) token.
//!
//! Each entry is one tokenized prompt (`Arc<[u32]>`) plus, for every boundary in it, the
//! 128-bit xxh3 of the text up to that boundary and the token count there. The index maps
//! those hashes to (entry, count), so the next turn of a conversation, whose rendered prompt
//! extends the previous one, reuses the previous tokens up to its last shared boundary and
//! tokenizes only the rest. An entry whose every boundary now points at a newer entry (the
//! previous turn of the same conversation) is dropped at once; otherwise entries leave in LRU
//! order once the byte budget is exceeded (`kvrouter_tokenizer_cache_evictions_total`). Clients
//! choose the prompts, so every entry is also charged its fixed structure cost
//! ([`BYTES_PER_ENTRY`]): the budget bounds the entry count as well (at most
//! `max_bytes / (BYTES_PER_ENTRY + 4 + BYTES_PER_BOUNDARY)`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Index bytes charged per boundary (hash, entry id, count and map overhead).
const BYTES_PER_BOUNDARY: usize = 64;
/// Bytes charged per entry beyond its tokens and boundaries: the entry in its map, its LRU
/// node, the token and key allocations' headers.
const BYTES_PER_ENTRY: usize = 160;

struct Entry {
    tokens: Arc<[u32]>,
    keys: Vec<u128>,
    tick: u64,
}

impl Entry {
    fn bytes(&self) -> usize {
        charge(self.tokens.len(), self.keys.len())
    }
}

/// Bytes charged for an entry of `tokens` tokens and `boundaries` boundaries.
fn charge(tokens: usize, boundaries: usize) -> usize {
    BYTES_PER_ENTRY + tokens * 4 + boundaries * BYTES_PER_BOUNDARY
}

/// Bounded map from rendered-prefix hashes to token ids (see module docs).
pub(crate) struct PrefixCache {
    max_bytes: usize,
    used: usize,
    tick: u64,
    next_id: u64,
    entries: HashMap<u64, Entry>,
    index: HashMap<u128, (u64, u32)>,
    lru: BTreeMap<u64, u64>,
}

impl PrefixCache {
    pub(crate) fn new(max_bytes: usize) -> Self {
        PrefixCache {
            max_bytes,
            used: 0,
            tick: 0,
            next_id: 0,
            entries: HashMap::new(),
            index: HashMap::new(),
            lru: BTreeMap::new(),
        }
    }

    /// The byte budget.
    pub(crate) fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// Bytes held (tokens and index).
    pub(crate) fn bytes(&self) -> usize {
        self.used
    }

    /// Tokenized prompts held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The tokens of the prefix hashed to `key`: (all tokens of its entry, how many of them
    /// belong to the prefix). Refreshes the entry's LRU position.
    pub(crate) fn get(&mut self, key: u128) -> Option<(Arc<[u32]>, usize)> {
        let &(id, count) = self.index.get(&key)?;
        self.tick += 1;
        let tick = self.tick;
        let entry = self.entries.get_mut(&id)?;
        self.lru.remove(&entry.tick);
        entry.tick = tick;
        self.lru.insert(tick, id);
        Some((entry.tokens.clone(), count as usize))
    }

    /// The token count at the prefix hashed to `key`, without refreshing anything.
    pub(crate) fn count(&self, key: u128) -> Option<u32> {
        self.index.get(&key).map(|&(_, n)| n)
    }

    /// Adds a tokenized prompt with its boundaries `(hash of the text up to it, tokens up to it)`.
    pub(crate) fn insert(&mut self, tokens: Arc<[u32]>, boundaries: Vec<(u128, u32)>) {
        let bytes = charge(tokens.len(), boundaries.len());
        if boundaries.is_empty() || bytes > self.max_bytes {
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.tick += 1;
        let mut replaced = Vec::new();
        for &(key, count) in &boundaries {
            if let Some((old, _)) = self.index.insert(key, (id, count)) {
                if replaced.last() != Some(&old) {
                    replaced.push(old);
                }
            }
        }
        let entry = Entry {
            tokens,
            keys: boundaries.iter().map(|b| b.0).collect(),
            tick: self.tick,
        };
        self.used += entry.bytes();
        self.lru.insert(self.tick, id);
        self.entries.insert(id, entry);
        // Entries fully covered by the new one (a conversation's previous turn) go now.
        replaced.sort_unstable();
        replaced.dedup();
        for old in replaced {
            let covered = self.entries.get(&old).is_some_and(|e| {
                e.keys
                    .iter()
                    .all(|k| self.index.get(k).is_some_and(|(i, _)| *i != old))
            });
            if covered {
                self.remove(old);
            }
        }
        let mut evicted = 0;
        while self.used > self.max_bytes {
            let Some((_, oldest)) = self.lru.pop_first() else {
                break;
            };
            self.remove(oldest);
            evicted += 1;
        }
        if evicted > 0 {
            crate::metrics::bounds::BoundsMetrics::get()
                .tokenizer_cache_evictions
                .inc_by(evicted);
        }
    }

    fn remove(&mut self, id: u64) {
        let Some(entry) = self.entries.remove(&id) else {
            return;
        };
        self.lru.remove(&entry.tick);
        self.used -= entry.bytes();
        for key in &entry.keys {
            if self.index.get(key).is_some_and(|(i, _)| *i == id) {
                self.index.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(n: u32) -> Arc<[u32]> {
        (0..n).collect::<Vec<_>>().into()
    }

    #[test]
    fn finds_prefixes_and_drops_superseded_turns() {
        let mut c = PrefixCache::new(1 << 20);
        c.insert(toks(10), vec![(1, 4), (2, 8)]);
        assert_eq!(c.get(2).map(|(t, n)| (t.len(), n)), Some((10, 8)));
        // The next turn extends both boundaries: the first entry is superseded.
        c.insert(toks(20), vec![(1, 4), (2, 8), (3, 16)]);
        assert_eq!(c.len(), 1);
        assert_eq!(c.get(2).map(|(t, n)| (t.len(), n)), Some((20, 8)));
        // A sibling sharing only a prefix keeps the older entry alive.
        c.insert(toks(12), vec![(1, 4), (4, 10)]);
        assert_eq!(c.len(), 2);
        assert!(c.get(3).is_some());
        assert!(c.get(9).is_none());
    }

    #[test]
    fn evicts_least_recently_used_within_the_byte_budget() {
        let per = charge(100, 1);
        let mut c = PrefixCache::new(per * 2);
        c.insert(toks(100), vec![(1, 50)]);
        c.insert(toks(100), vec![(2, 50)]);
        assert!(c.get(1).is_some()); // 1 is now the most recent
        c.insert(toks(100), vec![(3, 50)]);
        assert_eq!(c.len(), 2);
        assert!(c.get(2).is_none());
        assert!(c.get(1).is_some() && c.get(3).is_some());
        assert!(c.bytes() <= per * 2);
        // An entry larger than the whole budget is not kept.
        c.insert(toks(1000), vec![(4, 10)]);
        assert!(c.get(4).is_none());
        assert!(c.bytes() <= per * 2);
    }

    #[test]
    fn tiny_entries_are_bounded_in_count_by_the_byte_budget() {
        let mut c = PrefixCache::new(1 << 16);
        for k in 0..10_000u128 {
            c.insert(toks(1), vec![(k, 1)]);
        }
        assert!(c.bytes() <= 1 << 16);
        assert!(c.len() <= (1 << 16) / (BYTES_PER_ENTRY + 4 + BYTES_PER_BOUNDARY));
        assert!(c.get(9_999).is_some() && c.get(0).is_none());
    }
}
