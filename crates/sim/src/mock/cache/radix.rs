//! A paged radix tree of resident KV pages for one DP rank, modelled on SGLang's
//! `RadixCache` with `page_size > 1`: page-aligned keys, prefix matching that splits
//! nodes, `lock_ref` counting from a node up to the root, LRU eviction of unlocked
//! leaves, and the KV events each change produces (E3 semantics: one `Stored` per new
//! node, one `Removed` per evicted node, nothing on a split, `Cleared` on reset).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::block_hash::{event_hash, page_digest, PageDigest};
use super::event::CacheEvent;

/// Index of a node in the arena; [`ROOT`] is the empty prefix.
pub type NodeId = usize;
/// The root node (never evicted, holds no pages).
pub const ROOT: NodeId = 0;

/// Where an insertion ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inserted {
    /// Deepest node covering the inserted key.
    pub node: NodeId,
    /// Tokens of the key that were already resident before the call.
    pub already_present: usize,
    /// Tokens of the key now resident (equals the key length unless a page-key
    /// collision stopped the insertion).
    pub covered: usize,
}

#[derive(Debug, Default)]
struct Node {
    parent: NodeId,
    children: HashMap<u64, NodeId>,
    tokens: Vec<u32>,
    digests: Vec<PageDigest>,
    lock_ref: u32,
    last_access: u64,
}

impl Node {
    fn pages(&self, page: usize) -> usize {
        self.tokens.len() / page
    }
}

/// The paged radix tree.
#[derive(Debug)]
pub struct RadixCache {
    page: usize,
    nodes: Vec<Node>,
    free: Vec<NodeId>,
    tree_pages: usize,
    evictable_pages: usize,
    clock: u64,
    events: Vec<CacheEvent>,
}

fn page_key(page: &[u32]) -> u64 {
    let mut k: u64 = 0xcbf2_9ce4_8422_2325;
    for &t in page {
        k = (k ^ u64::from(t)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    k
}

impl RadixCache {
    /// An empty tree with `page` tokens per page. Records `Cleared` (as SGLang's reset at
    /// construction does).
    pub fn new(page: usize) -> RadixCache {
        let mut c = RadixCache {
            page,
            nodes: vec![Node::default()],
            free: Vec::new(),
            tree_pages: 0,
            evictable_pages: 0,
            clock: 0,
            events: Vec::new(),
        };
        c.events.push(CacheEvent::Cleared);
        c
    }

    /// Tokens per page.
    pub fn page_size(&self) -> usize {
        self.page
    }

    /// Pages held by the tree.
    pub fn tree_pages(&self) -> usize {
        self.tree_pages
    }

    /// Pages held by the tree that no request locks.
    pub fn evictable_pages(&self) -> usize {
        self.evictable_pages
    }

    /// Takes the events recorded since the last call.
    pub fn take_events(&mut self) -> Vec<CacheEvent> {
        std::mem::take(&mut self.events)
    }

    /// True when events are waiting to be taken.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Longest resident page-aligned prefix of `key`: the node ending it and its length
    /// in tokens. Splits a node when the match ends inside it; refreshes LRU times.
    pub fn match_prefix(&mut self, key: &[u32]) -> (NodeId, usize) {
        let p = self.page;
        let key = &key[..key.len() / p * p];
        self.clock += 1;
        let mut node = ROOT;
        let mut pos = 0;
        while pos < key.len() {
            let Some(&child) = self.nodes[node].children.get(&page_key(&key[pos..pos + p])) else {
                break;
            };
            let m = self.common_pages(child, &key[pos..]);
            if m == 0 {
                break;
            }
            self.nodes[child].last_access = self.clock;
            pos += m * p;
            if m < self.nodes[child].pages(p) {
                node = self.split(child, m);
                break;
            }
            node = child;
        }
        (node, pos)
    }

    fn common_pages(&self, child: NodeId, key: &[u32]) -> usize {
        let p = self.page;
        let toks = &self.nodes[child].tokens;
        let max = toks.len().min(key.len()) / p;
        (0..max)
            .take_while(|&i| toks[i * p..(i + 1) * p] == key[i * p..(i + 1) * p])
            .count()
    }

    /// Splits `child` after `m` pages; returns the new upper node.
    fn split(&mut self, child: NodeId, m: usize) -> NodeId {
        let p = self.page;
        let parent = self.nodes[child].parent;
        let upper_tokens: Vec<u32> = self.nodes[child].tokens.drain(..m * p).collect();
        let upper_digests: Vec<PageDigest> = self.nodes[child].digests.drain(..m).collect();
        let lower_key = page_key(&self.nodes[child].tokens[..p]);
        let upper_key = page_key(&upper_tokens[..p]);
        let upper = self.alloc(Node {
            parent,
            children: HashMap::from([(lower_key, child)]),
            tokens: upper_tokens,
            digests: upper_digests,
            lock_ref: self.nodes[child].lock_ref,
            last_access: self.nodes[child].last_access,
        });
        self.nodes[child].parent = upper;
        self.nodes[parent].children.insert(upper_key, upper);
        upper
    }

    fn alloc(&mut self, node: Node) -> NodeId {
        match self.free.pop() {
            Some(id) => {
                self.nodes[id] = node;
                id
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        }
    }

    /// Inserts the page-aligned part of `key`, recording `Stored` for new pages.
    pub fn insert(&mut self, key: &[u32]) -> Inserted {
        let p = self.page;
        let key = &key[..key.len() / p * p];
        let (mut node, mut pos) = self.match_prefix(key);
        let already_present = pos;
        if pos < key.len() {
            let k = page_key(&key[pos..pos + p]);
            if self.nodes[node].children.contains_key(&k) {
                // A different page with the same key: leave the rest uncached.
                return Inserted {
                    node,
                    already_present,
                    covered: pos,
                };
            }
            let mut prev = self.nodes[node].digests.last().copied();
            let parent_hash = prev.as_ref().map(event_hash);
            let tokens = key[pos..].to_vec();
            let mut digests = Vec::with_capacity(tokens.len() / p);
            let mut hashes = Vec::with_capacity(tokens.len() / p);
            for page in tokens.chunks_exact(p) {
                let d = page_digest(prev.as_ref(), page);
                hashes.push(event_hash(&d));
                digests.push(d);
                prev = Some(d);
            }
            let pages = digests.len();
            let leaf = self.alloc(Node {
                parent: node,
                children: HashMap::new(),
                tokens: tokens.clone(),
                digests,
                lock_ref: 0,
                last_access: self.clock,
            });
            self.nodes[node].children.insert(k, leaf);
            self.tree_pages += pages;
            self.evictable_pages += pages;
            self.events
                .push(CacheEvent::stored(hashes, parent_hash, tokens));
            node = leaf;
            pos = key.len();
        }
        Inserted {
            node,
            already_present,
            covered: pos,
        }
    }

    /// Locks the path from `node` to the root against eviction.
    pub fn inc_lock(&mut self, mut node: NodeId) {
        while node != ROOT {
            let n = &mut self.nodes[node];
            if n.lock_ref == 0 {
                self.evictable_pages -= n.tokens.len() / self.page;
            }
            n.lock_ref += 1;
            node = n.parent;
        }
    }

    /// Releases a lock taken by [`inc_lock`](Self::inc_lock).
    pub fn dec_lock(&mut self, mut node: NodeId) {
        while node != ROOT {
            let n = &mut self.nodes[node];
            debug_assert!(n.lock_ref > 0, "unbalanced dec_lock");
            n.lock_ref = n.lock_ref.saturating_sub(1);
            if n.lock_ref == 0 {
                self.evictable_pages += n.tokens.len() / self.page;
            }
            node = n.parent;
        }
    }

    /// Evicts least-recently-used unlocked leaves until `pages` pages are freed (or
    /// nothing evictable is left). Returns the pages freed.
    pub fn evict(&mut self, pages: usize) -> usize {
        if pages == 0 || self.evictable_pages == 0 {
            return 0;
        }
        let mut heap: BinaryHeap<Reverse<(u64, NodeId)>> = BinaryHeap::new();
        for (id, n) in self.nodes.iter().enumerate().skip(1) {
            if !n.tokens.is_empty() && n.children.is_empty() && n.lock_ref == 0 {
                heap.push(Reverse((n.last_access, id)));
            }
        }
        let mut freed = 0;
        while freed < pages {
            let Some(Reverse((_, id))) = heap.pop() else {
                break;
            };
            let parent = self.nodes[id].parent;
            freed += self.remove_leaf(id);
            let pn = &self.nodes[parent];
            if parent != ROOT && pn.children.is_empty() && pn.lock_ref == 0 {
                heap.push(Reverse((pn.last_access, parent)));
            }
        }
        freed
    }

    fn remove_leaf(&mut self, id: NodeId) -> usize {
        let node = std::mem::take(&mut self.nodes[id]);
        let pages = node.pages(self.page);
        self.nodes[node.parent]
            .children
            .remove(&page_key(&node.tokens[..self.page]));
        self.tree_pages -= pages;
        self.evictable_pages -= pages;
        self.events.push(CacheEvent::removed(
            node.digests.iter().map(event_hash).collect(),
        ));
        self.free.push(id);
        pages
    }

    /// Event hashes of every resident page (for consistency checks).
    pub fn resident_hashes(&self) -> std::collections::HashSet<i64> {
        self.nodes
            .iter()
            .skip(1)
            .flat_map(|n| n.digests.iter().map(event_hash))
            .collect()
    }

    /// Drops every page (callers ensure nothing is locked) and records `Cleared`.
    pub fn reset(&mut self) {
        self.nodes.truncate(1);
        self.nodes[ROOT] = Node::default();
        self.free.clear();
        self.tree_pages = 0;
        self.evictable_pages = 0;
        self.events.push(CacheEvent::Cleared);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(n: u32, base: u32) -> Vec<u32> {
        (base..base + n).collect()
    }

    #[test]
    fn insert_then_match_is_page_aligned() {
        let mut c = RadixCache::new(4);
        c.take_events();
        let ins = c.insert(&toks(10, 0));
        assert_eq!(ins.covered, 8);
        assert_eq!(c.tree_pages(), 2);
        assert_eq!(c.match_prefix(&toks(10, 0)).1, 8);
        assert_eq!(c.match_prefix(&toks(7, 0)).1, 4);
        let ev = c.take_events();
        assert!(
            matches!(&ev[0], CacheEvent::Stored { hashes, parent: None, tokens, .. } if hashes.len() == 2 && tokens.len() == 8)
        );
    }

    #[test]
    fn split_keeps_locks_and_chains_parent_hash() {
        let mut c = RadixCache::new(2);
        let a = c.insert(&[1, 2, 3, 4, 5, 6]);
        c.inc_lock(a.node);
        assert_eq!(c.evictable_pages(), 0);
        let b = c.insert(&[1, 2, 3, 4, 9, 9]);
        assert_eq!(b.already_present, 4);
        let ev = c.take_events();
        let CacheEvent::Stored { hashes: first, .. } = &ev[1] else {
            panic!()
        };
        let CacheEvent::Stored { parent, hashes, .. } = &ev[2] else {
            panic!()
        };
        assert_eq!(*parent, Some(first[1]));
        assert_eq!(hashes.len(), 1);
        // only the new leaf [9,9] is evictable
        assert_eq!(c.evictable_pages(), 1);
        assert_eq!(c.evict(10), 1);
        c.dec_lock(a.node);
        assert_eq!(c.evictable_pages(), 3);
        assert_eq!(c.evict(10), 3);
        assert_eq!(c.tree_pages(), 0);
    }

    #[test]
    fn eviction_is_lru_and_reports_removed() {
        let mut c = RadixCache::new(2);
        c.insert(&[1, 1]);
        c.insert(&[2, 2]);
        c.match_prefix(&[1, 1, 0]);
        c.take_events();
        assert_eq!(c.evict(1), 1);
        assert_eq!(c.match_prefix(&[2, 2]).1, 0);
        assert_eq!(c.match_prefix(&[1, 1]).1, 2);
        assert!(
            matches!(&c.take_events()[..], [CacheEvent::Removed { hashes, .. }] if hashes.len() == 1)
        );
        c.reset();
        assert_eq!(c.take_events(), vec![CacheEvent::Cleared]);
        assert_eq!(c.tree_pages(), 0);
    }
}
