//! `PageFold`: the KV events of one (worker, rank) whose pages are smaller than the
//! router's (SGLang's default `page_size` 1 behind `--page-size 16`), folded into router
//! blocks. A worker page of `p` tokens sits at slot `0..P/p` of its router block (its
//! parent's slot + 1, counted from the start of the sequence); once the page at the last
//! slot is stored, the `P/p` pages ending there make one router block: its tokens are the
//! pages' tokens, its engine key is the last page's hash, its parent the key of the block
//! before (the hash of the page before its first page). Removing any page of a block
//! removes the block; the caller drops the whole fold on `Cleared`, a restart or a gap.
//!
//! State: one entry per resident worker page (parent, slot, tokens, the blocks it is part
//! of), bounded by the caller at the worker's KV capacity (`RankFeed`). Design notes:
//! docs/events.md `## Page fold`.

use std::collections::HashMap;

use kvrouter_index::{folds_into, EngineHash, KvEvent};

/// Pruning a page's block list of stale keys happens when it reaches this length (and at
/// each doubling after it).
const PRUNE_REFS_AT: usize = 64;

/// Tokens of one worker page (no allocation at page size 1).
#[derive(Debug)]
enum PageTokens {
    One(u32),
    Many(Box<[u32]>),
}

impl PageTokens {
    fn new(tokens: &[u32]) -> Self {
        match tokens {
            [one] => PageTokens::One(*one),
            many => PageTokens::Many(many.into()),
        }
    }

    fn as_slice(&self) -> &[u32] {
        match self {
            PageTokens::One(t) => std::slice::from_ref(t),
            PageTokens::Many(ts) => ts,
        }
    }
}

/// The router blocks (keys) a worker page is part of: several when sequences branch
/// inside a router block.
#[derive(Debug, Default)]
enum BlockRefs {
    #[default]
    None,
    One(EngineHash),
    Many(Vec<EngineHash>),
}

impl BlockRefs {
    fn as_slice(&self) -> &[EngineHash] {
        match self {
            BlockRefs::None => &[],
            BlockRefs::One(b) => std::slice::from_ref(b),
            BlockRefs::Many(bs) => bs,
        }
    }

    /// Adds `block` (no duplicates); true when the list just reached a pruning length.
    fn add(&mut self, block: EngineHash) -> bool {
        match self {
            BlockRefs::None => *self = BlockRefs::One(block),
            BlockRefs::One(b) if *b == block => {}
            BlockRefs::One(b) => *self = BlockRefs::Many(vec![*b, block]),
            BlockRefs::Many(bs) => {
                if !bs.contains(&block) {
                    bs.push(block);
                    return bs.len() >= PRUNE_REFS_AT && bs.len().is_power_of_two();
                }
            }
        }
        false
    }

    fn remove(&mut self, block: EngineHash) {
        match self {
            BlockRefs::One(b) if *b == block => *self = BlockRefs::None,
            BlockRefs::Many(bs) => bs.retain(|b| *b != block),
            _ => {}
        }
    }
}

#[derive(Debug)]
struct Page {
    parent: Option<EngineHash>,
    /// Position of the page inside its router block, `0..pages_per_block`.
    slot: u32,
    tokens: PageTokens,
    blocks: BlockRefs,
}

/// Why a store was not folded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FoldError {
    /// The store's parent page is not known (stored before this router listened, or
    /// already removed): its pages cannot be placed in router blocks and are dropped.
    #[error("parent page {0:#x} is unknown")]
    UnknownParent(EngineHash),
}

/// Folds one (worker, rank)'s `worker_page`-token pages into `router_page`-token blocks.
#[derive(Debug)]
pub(crate) struct PageFold {
    worker_page: u32,
    per_block: u32,
    pages: HashMap<EngineHash, Page>,
}

impl PageFold {
    /// A fold of `worker_page`-token pages into `router_page`-token blocks, or None when
    /// they cannot be folded (not smaller than the router's page, or not a divisor of it).
    pub(crate) fn new(worker_page: u32, router_page: u32) -> Option<Self> {
        folds_into(worker_page, router_page).then(|| Self {
            worker_page,
            per_block: router_page / worker_page,
            pages: HashMap::new(),
        })
    }

    /// Tokens per worker page.
    pub(crate) fn worker_page(&self) -> u32 {
        self.worker_page
    }

    /// Worker pages per router block.
    pub(crate) fn pages_per_block(&self) -> u32 {
        self.per_block
    }

    /// Worker pages held (resident ones whose router block may still be completed or removed).
    pub(crate) fn len(&self) -> usize {
        self.pages.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Forgets every page.
    #[cfg(test)]
    pub(crate) fn clear(&mut self) {
        self.pages = HashMap::new();
    }

    /// Records a worker store (`hashes.len()` pages of `worker_page` tokens chained after
    /// `parent`) and returns the router blocks it completes, as `Stored` events of
    /// `router_page`-token blocks (consecutive chained blocks in one event). A page already
    /// known keeps its place; a store completing an already known block repeats it (the
    /// index ignores resident blocks). `tokens` must hold `hashes.len() * worker_page` ids.
    pub(crate) fn stored(
        &mut self,
        parent: Option<EngineHash>,
        hashes: &[EngineHash],
        tokens: &[u32],
    ) -> Result<Vec<KvEvent>, FoldError> {
        let mut prev_slot = match parent {
            None => None,
            Some(p) => Some(self.pages.get(&p).ok_or(FoldError::UnknownParent(p))?.slot),
        };
        let mut prev = parent;
        let mut out: Vec<KvEvent> = Vec::new();
        let page = self.worker_page as usize;
        for (hash, page_tokens) in hashes.iter().zip(tokens.chunks_exact(page)) {
            let slot = prev_slot.map_or(0, |s| (s + 1) % self.per_block);
            let slot = self
                .pages
                .entry(*hash)
                .or_insert_with(|| Page {
                    parent: prev,
                    slot,
                    tokens: PageTokens::new(page_tokens),
                    blocks: BlockRefs::None,
                })
                .slot;
            if slot + 1 == self.per_block {
                if let Some((block_parent, block_tokens)) = self.complete(*hash) {
                    push_block(
                        &mut out,
                        block_parent,
                        *hash,
                        block_tokens,
                        self.router_page(),
                    );
                }
            }
            prev = Some(*hash);
            prev_slot = Some(slot);
        }
        Ok(out)
    }

    /// Forgets removed worker pages (unknown hashes are ignored) and returns the keys of the
    /// router blocks that contained any of them.
    pub(crate) fn removed(&mut self, hashes: &[EngineHash]) -> Vec<EngineHash> {
        let mut out = Vec::new();
        for hash in hashes {
            let Some(page) = self.pages.remove(hash) else {
                continue;
            };
            for &block in page.blocks.as_slice() {
                if block == *hash || self.is_live(block) {
                    if !out.contains(&block) {
                        out.push(block);
                    }
                    self.unlink(block, *hash, page.parent);
                }
            }
        }
        out
    }

    /// Whether router block `block` is stored: its last page is held and still lists it
    /// (removing the block through any of its pages unlists it from the last one first).
    fn is_live(&self, block: EngineHash) -> bool {
        self.pages
            .get(&block)
            .is_some_and(|p| p.blocks.as_slice().contains(&block))
    }

    fn router_page(&self) -> u32 {
        self.worker_page * self.per_block
    }

    /// The block ending at page `last`: registers it with its pages and returns its parent
    /// key and tokens, or None when one of its pages is missing.
    fn complete(&mut self, last: EngineHash) -> Option<(Option<EngineHash>, Vec<u32>)> {
        let mut chain = Vec::with_capacity(self.per_block as usize);
        let mut at = Some(last);
        for _ in 0..self.per_block {
            let hash = at?;
            let page = self.pages.get(&hash)?;
            chain.push(hash);
            at = page.parent;
        }
        let block_parent = at;
        let mut tokens = Vec::with_capacity(self.router_page() as usize);
        let mut prune = false;
        for hash in chain.iter().rev() {
            if let Some(page) = self.pages.get_mut(hash) {
                tokens.extend_from_slice(page.tokens.as_slice());
                prune |= page.blocks.add(last);
            }
        }
        if prune {
            self.prune(&chain);
        }
        Some((block_parent, tokens))
    }

    /// Drops, from the block lists of `chain`'s pages, blocks no longer stored (they can
    /// only come back through their last page's store, which lists them again).
    fn prune(&mut self, chain: &[EngineHash]) {
        for hash in chain {
            let stale: Vec<EngineHash> = match self.pages.get(hash) {
                Some(page) => page
                    .blocks
                    .as_slice()
                    .iter()
                    .copied()
                    .filter(|b| !self.is_live(*b))
                    .collect(),
                None => continue,
            };
            if let Some(page) = self.pages.get_mut(hash) {
                for b in stale {
                    page.blocks.remove(b);
                }
            }
        }
    }

    /// Removes `block` from the lists of its pages still held, walking back from its last
    /// page (`removed` is the page just taken out, whose parent is `removed_parent`). A
    /// page left out (its chain broken by an earlier removal) keeps a stale key: ignored
    /// ([`PageFold::is_live`]), pruned as lists grow, and right again should the block be
    /// stored again (a key names one chain of pages).
    fn unlink(
        &mut self,
        block: EngineHash,
        removed: EngineHash,
        removed_parent: Option<EngineHash>,
    ) {
        let (mut at, mut left) = if block == removed {
            (removed_parent, self.per_block - 1)
        } else {
            (Some(block), self.per_block)
        };
        while left > 0 {
            let Some(page) = at.and_then(|h| self.pages.get_mut(&h)) else {
                return;
            };
            page.blocks.remove(block);
            at = page.parent;
            left -= 1;
        }
    }
}

/// Appends block `key` to the last event when it chains after it, else starts an event.
fn push_block(
    out: &mut Vec<KvEvent>,
    parent: Option<EngineHash>,
    key: EngineHash,
    tokens: Vec<u32>,
    router_page: u32,
) {
    if let Some(KvEvent::Stored {
        block_hashes,
        token_ids,
        ..
    }) = out.last_mut()
    {
        if parent.is_some() && block_hashes.last() == parent.as_ref() {
            block_hashes.push(key);
            token_ids.extend_from_slice(&tokens);
            return;
        }
    }
    out.push(KvEvent::Stored {
        parent,
        block_hashes: vec![key],
        token_ids: tokens,
        block_size: router_page,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Page hashes of a chain: `base + i` for page `i`.
    fn chain(base: u64, pages: usize) -> Vec<EngineHash> {
        (0..pages as u64).map(|i| base + i).collect()
    }

    fn stored_keys(events: &[KvEvent]) -> Vec<(Option<EngineHash>, Vec<EngineHash>, usize)> {
        events
            .iter()
            .map(|e| match e {
                KvEvent::Stored {
                    parent,
                    block_hashes,
                    token_ids,
                    block_size,
                } => {
                    assert_eq!(token_ids.len(), block_hashes.len() * *block_size as usize);
                    (*parent, block_hashes.clone(), token_ids.len())
                }
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_page_entry_stays_small() {
        // docs/events.md quotes ~100 B per held page (this entry, its key, the map's slack).
        assert!(
            std::mem::size_of::<Page>() <= 80,
            "{}",
            std::mem::size_of::<Page>()
        );
    }

    #[test]
    fn sizes_that_do_not_fold_make_no_fold() {
        assert!(PageFold::new(3, 16).is_none() && PageFold::new(16, 16).is_none());
        assert!(PageFold::new(32, 16).is_none() && PageFold::new(0, 16).is_none());
        let f = PageFold::new(4, 16).expect("foldable");
        assert_eq!((f.worker_page(), f.pages_per_block()), (4, 4));
    }

    #[test]
    fn a_chain_of_single_token_pages_makes_router_blocks() {
        let mut f = PageFold::new(1, 4).expect("foldable");
        let tokens: Vec<u32> = (100..110).collect();
        let hashes = chain(1, 10);
        let out = f.stored(None, &hashes, &tokens).expect("folds");
        // 10 tokens: blocks end at pages 4 and 8, chained in one event; 2 pages pending.
        assert_eq!(stored_keys(&out), vec![(None, vec![4, 8], 8)]);
        match &out[0] {
            KvEvent::Stored {
                token_ids,
                block_size,
                ..
            } => {
                assert_eq!(token_ids, &tokens[..8]);
                assert_eq!(*block_size, 4);
            }
            other => panic!("{other:?}"),
        }
        // Two more pages, one event per page as SGLang's radix cache sends them.
        assert!(f.stored(Some(10), &[11], &[110]).expect("ok").is_empty());
        let out = f.stored(Some(11), &[12], &[111]).expect("ok");
        assert_eq!(stored_keys(&out), vec![(Some(8), vec![12], 4)]);
        match &out[0] {
            KvEvent::Stored { token_ids, .. } => assert_eq!(token_ids, &[108, 109, 110, 111]),
            other => panic!("{other:?}"),
        }
        assert_eq!(f.len(), 12);
    }

    #[test]
    fn multi_token_pages_fold_too() {
        let mut f = PageFold::new(2, 8).expect("foldable");
        let tokens: Vec<u32> = (0..16).collect();
        let out = f.stored(None, &chain(1, 8), &tokens).expect("ok");
        assert_eq!(stored_keys(&out), vec![(None, vec![4, 8], 16)]);
    }

    #[test]
    fn a_branch_inside_a_block_completes_its_own_block() {
        let mut f = PageFold::new(1, 4).expect("foldable");
        f.stored(None, &chain(1, 4), &[1, 2, 3, 4]).expect("ok");
        // Diverges after two tokens: pages 20, 21 at slots 2, 3 complete a second block
        // sharing the first two pages.
        let out = f.stored(Some(2), &[20, 21], &[7, 8]).expect("ok");
        assert_eq!(stored_keys(&out), vec![(None, vec![21], 4)]);
        match &out[0] {
            KvEvent::Stored { token_ids, .. } => assert_eq!(token_ids, &[1, 2, 7, 8]),
            other => panic!("{other:?}"),
        }
        // Removing a shared page removes both blocks.
        let mut removed = f.removed(&[1]);
        removed.sort_unstable();
        assert_eq!(removed, vec![4, 21]);
    }

    #[test]
    fn partial_blocks_are_held_until_complete_and_never_emitted() {
        let mut f = PageFold::new(1, 16).expect("foldable");
        let out = f.stored(None, &chain(1, 15), &[5; 15]).expect("ok");
        assert!(out.is_empty());
        assert_eq!(f.removed(&[15]), Vec::<EngineHash>::new(), "no block yet");
        assert_eq!(f.len(), 14);
    }

    #[test]
    fn removing_any_page_of_a_block_removes_it_once() {
        let mut f = PageFold::new(1, 4).expect("foldable");
        f.stored(None, &chain(1, 8), &[9; 8]).expect("ok");
        // SGLang removes a node's pages root-first: the first page names the block.
        assert_eq!(f.removed(&[5, 6, 7, 8]), vec![8]);
        assert_eq!(f.removed(&[2]), vec![4], "a middle page");
        assert_eq!(f.removed(&[4, 1, 3, 99]), Vec::<EngineHash>::new());
        assert!(f.is_empty());
        // Stored again: the block is announced again.
        let out = f.stored(None, &chain(1, 4), &[9; 4]).expect("ok");
        assert_eq!(stored_keys(&out), vec![(None, vec![4], 4)]);
    }

    #[test]
    fn an_unknown_parent_drops_the_store() {
        let mut f = PageFold::new(1, 4).expect("foldable");
        assert_eq!(
            f.stored(Some(77), &[1, 2, 3, 4], &[1, 2, 3, 4]),
            Err(FoldError::UnknownParent(77))
        );
        assert!(f.is_empty());
    }

    #[test]
    fn restoring_known_pages_repeats_their_blocks_without_growing() {
        let mut f = PageFold::new(1, 4).expect("foldable");
        let first = f.stored(None, &chain(1, 4), &[1, 2, 3, 4]).expect("ok");
        let again = f.stored(None, &chain(1, 4), &[1, 2, 3, 4]).expect("ok");
        assert_eq!(first, again);
        assert_eq!(f.len(), 4);
        assert_eq!(f.removed(&[1]), vec![4]);
    }

    #[test]
    fn clear_forgets_everything() {
        let mut f = PageFold::new(1, 4).expect("foldable");
        f.stored(None, &chain(1, 6), &[1; 6]).expect("ok");
        f.clear();
        assert!(f.is_empty());
        assert_eq!(
            f.stored(Some(6), &[7, 8], &[1, 1]),
            Err(FoldError::UnknownParent(6))
        );
        assert_eq!(f.removed(&[4]), Vec::<EngineHash>::new());
    }

    #[test]
    fn stale_block_keys_are_pruned_as_branches_come_and_go() {
        let mut f = PageFold::new(1, 4).expect("foldable");
        f.stored(None, &[1], &[1]).expect("ok");
        // Many branches off page 1, each completing a block, each removed middle page
        // first (out of radix order), leaving stale keys on page 1.
        for i in 0..1000u64 {
            let base = 1000 + i * 10;
            let out = f
                .stored(Some(1), &[base, base + 1, base + 2], &[2, 3, 4])
                .expect("ok");
            assert_eq!(out.len(), 1);
            assert_eq!(f.removed(&[base + 1]), vec![base + 2]);
            assert!(f.removed(&[base, base + 2]).is_empty(), "removed once");
        }
        let refs = f.pages.get(&1).expect("held").blocks.as_slice().len();
        assert!(refs < 2 * PRUNE_REFS_AT, "{refs} keys kept");
    }
}
