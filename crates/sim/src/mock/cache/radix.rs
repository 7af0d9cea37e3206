//! A paged radix tree of resident KV pages for one DP rank, modelled on SGLang's
//! `RadixCache` with `page_size > 1`: page-aligned keys, prefix matching that splits
//! nodes, `lock_ref` counting from a node up to the root, LRU eviction of unlocked
//! leaves, and the KV events each change produces (one `Stored` per new node, one
//! `Removed` per evicted node, nothing on a split, `Cleared` on reset).
//!
//! Keys are namespaced (`namespace.rs`): a request's `(extra_key, cache_salt)` selects its
//! own subtree (SGLang's `RadixKey` child keys carry both), so a request hits only pages
//! stored under its namespace, and the published hashes are namespaced as SGLang's
//! recorder namespaces them.
//!
//! With a host tier (`host.rs`, HiCache) a node is resident on the GPU, on the host or
//! both; evicted GPU nodes are kept on the host, a host match is loaded back.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::block_hash::{event_hash, page_digest, PageDigest};
use super::event::{CacheEvent, Medium};
use super::host_tier::HostTier;
use super::namespace::{namespace_seed, namespaced_block_hash, salt_chain_seed, Namespace};

/// Index of a node in the arena; [`ROOT`] is the empty prefix.
pub type NodeId = usize;
/// The root node (never evicted, holds no pages).
pub const ROOT: NodeId = 0;
/// Index of an interned namespace; [`PLAIN`] is the base-model tree.
pub type NsId = u32;
/// The un-namespaced tree.
pub const PLAIN: NsId = 0;

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

#[derive(Debug)]
pub(super) struct Node {
    pub(super) parent: NodeId,
    pub(super) children: HashMap<u64, NodeId>,
    pub(super) tokens: Vec<u32>,
    /// The event-hash chain of the node's pages, before namespacing.
    pub(super) digests: Vec<PageDigest>,
    pub(super) ns: NsId,
    pub(super) lock_ref: u32,
    pub(super) last_access: u64,
    /// Resident in device memory.
    pub(super) on_gpu: bool,
    /// Backed up in the host tier.
    pub(super) on_host: bool,
    /// Protected from host eviction while its load-back is prepared.
    pub(super) pinned: bool,
}

impl Default for Node {
    fn default() -> Self {
        Node {
            parent: ROOT,
            children: HashMap::new(),
            tokens: Vec::new(),
            digests: Vec::new(),
            ns: PLAIN,
            lock_ref: 0,
            last_access: 0,
            on_gpu: true,
            on_host: false,
            pinned: false,
        }
    }
}

impl Node {
    pub(super) fn pages(&self, page: usize) -> usize {
        self.tokens.len() / page
    }
}

#[derive(Debug)]
struct NsEntry {
    extra_key: Option<String>,
    cache_salt: Option<String>,
    salt_seed: Option<PageDigest>,
}

/// The paged radix tree.
#[derive(Debug)]
pub struct RadixCache {
    pub(super) page: usize,
    pub(super) nodes: Vec<Node>,
    free: Vec<NodeId>,
    pub(super) tree_pages: usize,
    pub(super) evictable_pages: usize,
    pub(super) clock: u64,
    pub(super) events: Vec<CacheEvent>,
    ns_table: Vec<NsEntry>,
    ns_index: HashMap<(Option<String>, Option<String>), NsId>,
    /// `KvEventLoraNames._names`: final extra_key -> adapter name (request registrations).
    lora_names: HashMap<String, String>,
    /// `KvEventLoraNames._adapter_names`: lora_id -> adapter name (`--lora-paths`).
    adapter_names: HashMap<String, String>,
    /// `KVEventsConfig.format == "dynamo"`: hashes also namespaced by salt and any
    /// extra_key, `lora_name` resolved from the adapter table too.
    dynamo_format: bool,
    pub(super) host: Option<HostTier>,
}

fn page_key(ns: NsId, page: &[u32]) -> u64 {
    let mut k: u64 = 0xcbf2_9ce4_8422_2325 ^ u64::from(ns).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for &t in page {
        k = (k ^ u64::from(t)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    k
}

/// Length of the LoRA id at the end of an adapter request's extra_key (`_LORA_ID_LEN`).
const LORA_ID_LEN: usize = 32;

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
            ns_table: vec![NsEntry {
                extra_key: None,
                cache_salt: None,
                salt_seed: None,
            }],
            ns_index: HashMap::from([((None, None), PLAIN)]),
            lora_names: HashMap::new(),
            adapter_names: HashMap::new(),
            dynamo_format: false,
            host: None,
        };
        c.events.push(CacheEvent::Cleared);
        c
    }

    /// Publishes hashes in SGLang's `"dynamo"` event format (`KVEventsConfig.format`).
    pub fn set_dynamo_format(&mut self, on: bool) {
        self.dynamo_format = on;
    }

    /// Registers a loaded adapter (`KvEventLoraNames.from_lora_refs`: lora_id -> name).
    pub fn register_adapter(&mut self, lora_id: &str, name: &str) {
        self.adapter_names.insert(lora_id.into(), name.into());
    }

    /// Interns `ns` and, for an adapter request, registers its name under the final
    /// extra_key (`Scheduler._record_kv_event_lora_name`, done when a request arrives).
    pub fn namespace(&mut self, ns: &Namespace) -> NsId {
        if let (Some(k), Some(name)) = (&ns.extra_key, &ns.lora_name) {
            self.lora_names.insert(k.clone(), name.clone());
        }
        let key = (ns.extra_key.clone(), ns.cache_salt.clone());
        if let Some(&id) = self.ns_index.get(&key) {
            return id;
        }
        let id = self.ns_table.len() as NsId;
        self.ns_table.push(NsEntry {
            extra_key: ns.extra_key.clone(),
            cache_salt: ns.cache_salt.clone(),
            salt_seed: ns.cache_salt.as_deref().map(salt_chain_seed),
        });
        self.ns_index.insert(key, id);
        id
    }

    /// Tokens per page.
    pub fn page_size(&self) -> usize {
        self.page
    }

    /// GPU pages held by the tree.
    pub fn tree_pages(&self) -> usize {
        self.tree_pages
    }

    /// GPU pages held by the tree that no request locks.
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

    /// [`match_prefix_in`](Self::match_prefix_in) in the plain namespace.
    pub fn match_prefix(&mut self, key: &[u32]) -> (NodeId, usize) {
        self.match_prefix_in(PLAIN, key)
    }

    /// Longest GPU-resident page-aligned prefix of `key` in namespace `ns`: the node ending
    /// it and its length in tokens. Splits a node when the match ends inside it; refreshes
    /// LRU times.
    pub fn match_prefix_in(&mut self, ns: NsId, key: &[u32]) -> (NodeId, usize) {
        self.clock += 1;
        self.walk(ns, ROOT, key, true)
    }

    /// From `node`, follows `key` (page-aligned) through children resident on the GPU
    /// (`gpu`) or host-only (`!gpu`); returns the deepest node and the tokens matched.
    pub(super) fn walk(
        &mut self,
        ns: NsId,
        from: NodeId,
        key: &[u32],
        gpu: bool,
    ) -> (NodeId, usize) {
        let p = self.page;
        let key = &key[..key.len() / p * p];
        let mut node = from;
        let mut pos = 0;
        while pos < key.len() {
            let Some(&child) = self.nodes[node]
                .children
                .get(&page_key(ns, &key[pos..pos + p]))
            else {
                break;
            };
            let c = &self.nodes[child];
            if c.on_gpu != gpu || (!gpu && !c.on_host) {
                break;
            }
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
        let ns = self.nodes[child].ns;
        let upper_tokens: Vec<u32> = self.nodes[child].tokens.drain(..m * p).collect();
        let upper_digests: Vec<PageDigest> = self.nodes[child].digests.drain(..m).collect();
        let lower_key = page_key(ns, &self.nodes[child].tokens[..p]);
        let upper_key = page_key(ns, &upper_tokens[..p]);
        let c = &self.nodes[child];
        let (lock_ref, last_access, on_gpu, on_host, pinned) =
            (c.lock_ref, c.last_access, c.on_gpu, c.on_host, c.pinned);
        let upper = self.alloc(Node {
            parent,
            children: HashMap::from([(lower_key, child)]),
            tokens: upper_tokens,
            digests: upper_digests,
            ns,
            lock_ref,
            last_access,
            on_gpu,
            on_host,
            pinned,
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

    /// [`insert_in`](Self::insert_in) in the plain namespace.
    pub fn insert(&mut self, key: &[u32]) -> Inserted {
        self.insert_in(PLAIN, key)
    }

    /// Inserts the page-aligned part of `key` into namespace `ns`, recording `Stored` for
    /// new pages. A host-only node on the path gets its device copy back from the fresh KV
    /// (`Stored` GPU, as SGLang's insert over an evicted, backed-up node).
    pub fn insert_in(&mut self, ns: NsId, key: &[u32]) -> Inserted {
        let p = self.page;
        let key = &key[..key.len() / p * p];
        let (mut node, mut pos) = self.match_prefix_in(ns, key);
        let already_present = pos;
        while pos < key.len() {
            let k = page_key(ns, &key[pos..pos + p]);
            if let Some(&child) = self.nodes[node].children.get(&k) {
                let m = self.common_pages(child, &key[pos..]);
                if self.nodes[child].on_gpu || m == 0 {
                    // A different page with the same key: leave the rest uncached.
                    break;
                }
                let child = if m < self.nodes[child].pages(p) {
                    self.split(child, m)
                } else {
                    child
                };
                self.nodes[child].last_access = self.clock;
                self.restore_to_gpu(child);
                node = child;
                pos += m * p;
                continue;
            }
            let leaf = self.new_leaf(node, ns, key[pos..].to_vec());
            self.nodes[node].children.insert(k, leaf);
            node = leaf;
            pos = key.len();
        }
        Inserted {
            node,
            already_present,
            covered: pos,
        }
    }

    fn new_leaf(&mut self, parent: NodeId, ns: NsId, tokens: Vec<u32>) -> NodeId {
        let mut prev = if parent == ROOT {
            self.ns_table[ns as usize].salt_seed
        } else {
            self.nodes[parent].digests.last().copied()
        };
        let digests: Vec<PageDigest> = tokens
            .chunks_exact(self.page)
            .map(|page| {
                let d = page_digest(prev.as_ref(), page);
                prev = Some(d);
                d
            })
            .collect();
        let pages = digests.len();
        let leaf = self.alloc(Node {
            parent,
            children: HashMap::new(),
            tokens,
            digests,
            ns,
            lock_ref: 0,
            last_access: self.clock,
            on_gpu: true,
            on_host: false,
            pinned: false,
        });
        self.tree_pages += pages;
        self.evictable_pages += pages;
        let ev = self.stored_event(leaf, Medium::Gpu);
        self.events.push(ev);
        self.after_gpu_store(leaf);
        leaf
    }

    /// A host-only node becomes GPU-resident again (insert over it, or a load-back).
    pub(super) fn restore_to_gpu(&mut self, id: NodeId) {
        let pages = self.nodes[id].pages(self.page);
        let n = &mut self.nodes[id];
        debug_assert!(!n.on_gpu && n.lock_ref == 0);
        n.on_gpu = true;
        self.tree_pages += pages;
        self.evictable_pages += pages;
        let ev = self.stored_event(id, Medium::Gpu);
        self.events.push(ev);
    }

    /// The hashes of node `id` as published: the raw event-hash chain, then
    /// `namespaced_block_hash` with the namespace's seed.
    fn published_hashes(&self, id: NodeId) -> Vec<i64> {
        let n = &self.nodes[id];
        let seed = self.event_seed(n.ns);
        n.digests
            .iter()
            .map(|d| namespaced_block_hash(event_hash(d), seed.as_ref()))
            .collect()
    }

    /// `KVCacheEventRecorder._namespace_seed`: in the default format only a registered
    /// adapter namespace seeds (salted chains already differ); the dynamo format seeds by
    /// both extra_key and cache_salt.
    fn event_seed(&self, ns: NsId) -> Option<PageDigest> {
        let e = &self.ns_table[ns as usize];
        if self.dynamo_format {
            return namespace_seed(e.extra_key.as_deref(), e.cache_salt.as_deref());
        }
        let registered = e
            .extra_key
            .as_deref()
            .filter(|k| self.lora_names.contains_key(*k));
        namespace_seed(registered, None)
    }

    /// `lora_name` of a node's events: `KvEventLoraNames.get` (default format) or
    /// `.resolve` (dynamo: also the adapter id at the end of extra_key).
    fn lora_name(&self, ns: NsId) -> Option<String> {
        let k = self.ns_table[ns as usize].extra_key.as_deref()?;
        if let Some(name) = self.lora_names.get(k) {
            return Some(name.clone());
        }
        if !self.dynamo_format || k.len() < LORA_ID_LEN {
            return None;
        }
        let id = k.get(k.len() - LORA_ID_LEN..)?;
        self.adapter_names.get(id).cloned()
    }

    /// `record_store(node, medium)`.
    pub(super) fn stored_event(&self, id: NodeId, medium: Medium) -> CacheEvent {
        let n = &self.nodes[id];
        let seed = self.event_seed(n.ns);
        let parent = (n.parent != ROOT)
            .then(|| self.nodes[n.parent].digests.last())
            .flatten()
            .map(|d| namespaced_block_hash(event_hash(d), seed.as_ref()));
        CacheEvent::Stored {
            hashes: self.published_hashes(id),
            parent,
            tokens: n.tokens.clone(),
            medium,
            cache_salt: self.ns_table[n.ns as usize].cache_salt.clone(),
            lora_name: self.lora_name(n.ns),
        }
    }

    /// `record_remove(node, medium)`.
    pub(super) fn removed_event(&self, id: NodeId, medium: Medium) -> CacheEvent {
        CacheEvent::Removed {
            hashes: self.published_hashes(id),
            medium,
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

    /// A GPU-resident, unlocked node without GPU-resident children.
    fn is_device_leaf(&self, id: NodeId) -> bool {
        let n = &self.nodes[id];
        id != ROOT
            && n.on_gpu
            && n.lock_ref == 0
            && !n.tokens.is_empty()
            && n.children.values().all(|&c| !self.nodes[c].on_gpu)
    }

    /// Evicts least-recently-used unlocked GPU leaves until `pages` GPU pages are freed
    /// (or nothing evictable is left). Returns the pages freed. With a host tier an evicted
    /// node stays on the host (written back when it had no host copy yet).
    pub fn evict(&mut self, pages: usize) -> usize {
        if pages == 0 || self.evictable_pages == 0 {
            return 0;
        }
        let mut heap: BinaryHeap<Reverse<(u64, NodeId)>> = BinaryHeap::new();
        for id in 1..self.nodes.len() {
            if self.is_device_leaf(id) {
                heap.push(Reverse((self.nodes[id].last_access, id)));
            }
        }
        let mut freed = 0;
        while freed < pages {
            let Some(Reverse((_, id))) = heap.pop() else {
                break;
            };
            if !self.is_device_leaf(id) {
                continue;
            }
            let parent = self.nodes[id].parent;
            freed += self.evict_device(id);
            if self.is_device_leaf(parent) {
                heap.push(Reverse((self.nodes[parent].last_access, parent)));
            }
        }
        freed
    }

    /// Drops node `id`'s device copy (SGLang's `evict_device_leaf`): write-back first backs
    /// an unbacked node up (`Stored` CPU_PINNED, after any host eviction it needs), then
    /// `Removed` GPU; a backed-up node stays in the tree host-only; a node without a host
    /// copy (no tier, write-through not yet backed up, host full) leaves the tree with any
    /// host-only nodes below it.
    fn evict_device(&mut self, id: NodeId) -> usize {
        let pages = self.nodes[id].pages(self.page);
        if self.host.is_some_and(|h| !h.write_through) && !self.nodes[id].on_host {
            self.host_store(id);
        }
        let ev = self.removed_event(id, Medium::Gpu);
        self.events.push(ev);
        self.nodes[id].on_gpu = false;
        self.tree_pages -= pages;
        self.evictable_pages -= pages;
        if !self.nodes[id].on_host {
            self.drop_subtree(id);
        }
        pages
    }

    /// Removes a node that has no device copy left, with the host-only nodes below it
    /// (`Removed` CPU_PINNED for each, leaves first).
    pub(super) fn drop_subtree(&mut self, id: NodeId) {
        let mut below = Vec::new();
        let mut stack: Vec<NodeId> = self.nodes[id].children.values().copied().collect();
        while let Some(c) = stack.pop() {
            below.push(c);
            stack.extend(self.nodes[c].children.values().copied());
        }
        for &c in below.iter().rev() {
            self.host_release(c);
        }
        for &c in below.iter().rev() {
            self.detach(c);
        }
        self.detach(id);
    }

    /// Unlinks a node (without children by now) from its parent and frees its slot.
    pub(super) fn detach(&mut self, id: NodeId) {
        let node = std::mem::take(&mut self.nodes[id]);
        if let Some(first) = node.tokens.get(..self.page) {
            self.nodes[node.parent]
                .children
                .remove(&page_key(node.ns, first));
        }
        self.free.push(id);
    }

    /// Event hashes of every GPU-resident page as published (for consistency checks).
    pub fn resident_hashes(&self) -> std::collections::HashSet<i64> {
        (1..self.nodes.len())
            .filter(|&id| self.nodes[id].on_gpu && !self.nodes[id].tokens.is_empty())
            .flat_map(|id| self.published_hashes(id))
            .collect()
    }

    /// Drops every page on every tier (callers ensure nothing is locked) and records
    /// `Cleared`. Namespaces and adapter names stay registered, as SGLang's table does.
    pub fn reset(&mut self) {
        self.nodes.truncate(1);
        self.nodes[ROOT] = Node::default();
        self.free.clear();
        self.tree_pages = 0;
        self.evictable_pages = 0;
        if let Some(h) = &mut self.host {
            h.used_pages = 0;
        }
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
