//! The HiCache host tier of the radix tree (SGLang `--enable-hierarchical-cache`,
//! `mem_cache/unified_cache/unified_tree_core.py`): a bounded pool of host pages holding
//! copies of tree nodes. Events follow SGLang's recorder calls there: a node backed up to
//! the host publishes `BlockStored` with medium `CPU_PINNED` (`finish_write_through`, when
//! the backup is acked: at insertion for write-through, before the device removal for
//! write-back, `unified_radix_cache.py` evict loop), a host copy dropped publishes
//! `BlockRemoved` `CPU_PINNED` (`_evict_host_leaf`, `_release_full_host_duplicate`), a
//! host hit loaded back publishes `BlockStored` `GPU` per loaded node (`load_back`).
//!
//! The mock's simplifications: a backup completes in the step that causes it (SGLang acks
//! it asynchronously), write-through backs up every new node at once (threshold 1), host
//! room is made by evicting host-only leaves first, then host copies of GPU-resident
//! nodes, least recently used first.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::event::Medium;
use super::host_tier::HostTier;
use super::radix::{NodeId, NsId, RadixCache, ROOT};

impl RadixCache {
    /// Enables the host tier.
    pub fn enable_host(&mut self, capacity_pages: usize, write_through: bool) {
        self.host = Some(HostTier {
            capacity_pages,
            write_through,
            used_pages: 0,
        });
    }

    /// True when a host tier is configured.
    pub fn has_host(&self) -> bool {
        self.host.is_some()
    }

    /// Pages held on the host tier.
    pub fn host_pages(&self) -> usize {
        self.host.map_or(0, |h| h.used_pages)
    }

    /// Write-through: back up a node just stored on the GPU.
    pub(super) fn after_gpu_store(&mut self, id: NodeId) {
        if self.host.is_some_and(|h| h.write_through) && !self.nodes[id].on_host {
            self.host_store(id);
        }
    }

    /// Copies node `id` to the host (`Stored` CPU_PINNED) when room can be made.
    pub(super) fn host_store(&mut self, id: NodeId) -> bool {
        let pages = self.nodes[id].pages(self.page);
        let Some(h) = self.host else { return false };
        if pages > h.capacity_pages {
            return false;
        }
        let short = (h.used_pages + pages).saturating_sub(h.capacity_pages);
        if short > 0 {
            self.host_evict(short, id);
        }
        let Some(h) = &mut self.host else {
            return false;
        };
        if h.used_pages + pages > h.capacity_pages {
            return false;
        }
        h.used_pages += pages;
        self.nodes[id].on_host = true;
        let ev = self.stored_event(id, Medium::CpuPinned);
        self.events.push(ev);
        true
    }

    /// Drops node `id`'s host copy (`Removed` CPU_PINNED); the node stays in the tree.
    pub(super) fn host_release(&mut self, id: NodeId) {
        if !self.nodes[id].on_host {
            return;
        }
        let pages = self.nodes[id].pages(self.page);
        let ev = self.removed_event(id, Medium::CpuPinned);
        self.events.push(ev);
        self.nodes[id].on_host = false;
        if let Some(h) = &mut self.host {
            h.used_pages = h.used_pages.saturating_sub(pages);
        }
    }

    fn is_host_leaf(&self, id: NodeId) -> bool {
        let n = &self.nodes[id];
        id != ROOT && n.on_host && !n.on_gpu && !n.pinned && n.children.is_empty()
    }

    /// Frees `pages` host pages for a backup of `keep`: host-only leaves leave the tree
    /// (LRU first), then host copies of GPU-resident nodes are dropped.
    fn host_evict(&mut self, pages: usize, keep: NodeId) {
        let mut heap: BinaryHeap<Reverse<(u64, NodeId)>> = BinaryHeap::new();
        for id in 1..self.nodes.len() {
            if id != keep && self.is_host_leaf(id) {
                heap.push(Reverse((self.nodes[id].last_access, id)));
            }
        }
        let mut freed = 0;
        while freed < pages {
            let Some(Reverse((_, id))) = heap.pop() else {
                break;
            };
            if !self.is_host_leaf(id) {
                continue;
            }
            let parent = self.nodes[id].parent;
            freed += self.nodes[id].pages(self.page);
            self.host_release(id);
            self.detach(id);
            if parent != keep && self.is_host_leaf(parent) {
                heap.push(Reverse((self.nodes[parent].last_access, parent)));
            }
        }
        if freed >= pages {
            return;
        }
        let mut dups: Vec<(u64, NodeId)> = (1..self.nodes.len())
            .filter(|&id| {
                let n = &self.nodes[id];
                id != keep && n.on_gpu && n.on_host && !n.pinned
            })
            .map(|id| (self.nodes[id].last_access, id))
            .collect();
        dups.sort_unstable();
        for (_, id) in dups {
            if freed >= pages {
                break;
            }
            freed += self.nodes[id].pages(self.page);
            self.host_release(id);
        }
    }

    /// Continues a GPU match ending at `from` through host-only nodes along `key` (the rest
    /// of the key after the GPU match): the deepest host node and the tokens it covers.
    pub fn host_match(&mut self, ns: NsId, from: NodeId, key: &[u32]) -> (NodeId, usize) {
        if self.host.is_none() {
            return (from, 0);
        }
        self.walk(ns, from, key, false)
    }

    /// Protects (or releases) the host nodes between `from` (exclusive) and `to` from host
    /// eviction while device memory is made for their load-back.
    pub fn pin_host_path(&mut self, from: NodeId, to: NodeId, on: bool) {
        let mut n = to;
        while n != from && n != ROOT {
            self.nodes[n].pinned = on;
            n = self.nodes[n].parent;
        }
    }

    /// Loads the host nodes between `from` (exclusive) and `to` back to the GPU, top down
    /// (`Stored` GPU each); returns the pages loaded.
    pub fn load_back(&mut self, from: NodeId, to: NodeId) -> usize {
        let mut path = Vec::new();
        let mut n = to;
        while n != from && n != ROOT {
            path.push(n);
            n = self.nodes[n].parent;
        }
        let mut pages = 0;
        for &id in path.iter().rev() {
            if !self.nodes[id].on_gpu {
                pages += self.nodes[id].pages(self.page);
                self.restore_to_gpu(id);
            }
        }
        pages
    }
}

#[cfg(test)]
mod tests {
    use crate::mock::cache::{CacheEvent, Medium, RadixCache};

    fn media(evs: &[CacheEvent]) -> Vec<(&'static str, Medium)> {
        evs.iter()
            .filter_map(|e| match e {
                CacheEvent::Stored { medium, .. } => Some(("stored", *medium)),
                CacheEvent::Removed { medium, .. } => Some(("removed", *medium)),
                CacheEvent::Cleared => None,
            })
            .collect()
    }

    #[test]
    fn write_back_moves_evicted_pages_to_host_and_loads_them_back() {
        let mut c = RadixCache::new(4);
        c.enable_host(2, false);
        c.take_events();
        c.insert(&(1..9).collect::<Vec<u32>>());
        assert_eq!(c.evict(2), 2);
        assert_eq!(c.tree_pages(), 0);
        assert_eq!(c.host_pages(), 2);
        assert_eq!(
            media(&c.take_events())[1..],
            [("stored", Medium::CpuPinned), ("removed", Medium::Gpu)]
        );
        let key: Vec<u32> = (1..10).collect();
        let (node, dev) = c.match_prefix(&key);
        assert_eq!(dev, 0);
        let (to, host) = c.host_match(0, node, &key);
        assert_eq!(host, 8);
        assert_eq!(c.load_back(node, to), 2);
        assert_eq!(c.match_prefix(&key).1, 8);
        assert_eq!(media(&c.take_events()), [("stored", Medium::Gpu)]);
        // Host full: a second evicted node pushes the first host copy out.
        c.insert(&(20..28).collect::<Vec<u32>>());
        c.match_prefix(&key);
        c.take_events();
        c.evict(2);
        let ev = media(&c.take_events());
        assert!(ev.contains(&("removed", Medium::CpuPinned)), "{ev:?}");
        assert_eq!(c.host_pages(), 2);
    }

    #[test]
    fn write_through_backs_up_at_insert_and_drops_host_only_leaves() {
        let mut c = RadixCache::new(4);
        c.enable_host(4, true);
        c.take_events();
        c.insert(&(1..5).collect::<Vec<u32>>());
        assert_eq!(
            media(&c.take_events()),
            [("stored", Medium::Gpu), ("stored", Medium::CpuPinned)]
        );
        assert_eq!(c.evict(1), 1);
        assert_eq!(media(&c.take_events()), [("removed", Medium::Gpu)]);
        assert_eq!(c.host_pages(), 1);
        c.reset();
        assert_eq!(c.host_pages(), 0);
    }
}
