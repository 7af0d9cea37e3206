//! Incremental block hashing for sessions: a [`BlockHasher`] remembers the chain
//! and the tail of a partial page, so the next turn hashes only its new tokens.

use super::hash::{local_hash, next_seq, SeqHash};

/// Chained sequence hashes of a growing token stream.
///
/// Feed tokens with [`BlockHasher::extend`] (any split); every completed page
/// appends one sequence hash. Cloning a hasher forks a session.
#[derive(Debug, Clone)]
pub struct BlockHasher {
    page_size: usize,
    seq: Vec<SeqHash>,
    /// Tokens of the current partial page (always shorter than `page_size`).
    tail: Vec<u32>,
}

impl BlockHasher {
    /// An empty chain for pages of `page_size` tokens (must be > 0).
    pub fn new(page_size: usize) -> Self {
        assert!(page_size > 0, "page_size must be positive");
        Self {
            page_size,
            seq: Vec::new(),
            tail: Vec::with_capacity(page_size),
        }
    }

    /// A hasher primed with `tokens` (the whole prompt so far).
    pub fn from_tokens(page_size: usize, tokens: &[u32]) -> Self {
        let mut h = Self::new(page_size);
        h.extend(tokens);
        h
    }

    /// Page size in tokens.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Sequence hashes of all full pages seen so far.
    pub fn seq_hashes(&self) -> &[SeqHash] {
        &self.seq
    }

    /// Total tokens fed so far (full pages plus the partial tail).
    pub fn tokens_len(&self) -> usize {
        self.seq.len() * self.page_size + self.tail.len()
    }

    /// Appends `tokens` to the stream; returns how many new full pages were hashed.
    pub fn extend(&mut self, mut tokens: &[u32]) -> usize {
        let before = self.seq.len();
        let mut prev = self.seq.last().copied();
        if !self.tail.is_empty() {
            let need = self.page_size - self.tail.len();
            let take = need.min(tokens.len());
            self.tail.extend_from_slice(&tokens[..take]);
            tokens = &tokens[take..];
            if self.tail.len() < self.page_size {
                return 0;
            }
            let seq = next_seq(prev, local_hash(&self.tail));
            self.seq.push(seq);
            prev = Some(seq);
            self.tail.clear();
        }
        let pages = tokens.chunks_exact(self.page_size);
        let rest = pages.remainder();
        self.seq.reserve(tokens.len() / self.page_size);
        for page in pages {
            let seq = next_seq(prev, local_hash(page));
            self.seq.push(seq);
            prev = Some(seq);
        }
        self.tail.extend_from_slice(rest);
        self.seq.len() - before
    }

    /// Re-targets the hasher on `tokens`, the full prompt of the next turn: keeps
    /// the chain for the longest page-aligned prefix already hashed and hashes
    /// only what follows. Returns how many pages were reused.
    ///
    /// `known_prefix_tokens` is how many leading tokens the caller knows are
    /// unchanged since the last call (sessions append); they are not re-checked.
    pub fn advance_to(&mut self, tokens: &[u32], known_prefix_tokens: usize) -> usize {
        let keep_pages =
            (known_prefix_tokens.min(tokens.len()) / self.page_size).min(self.seq.len());
        self.seq.truncate(keep_pages);
        self.tail.clear();
        self.extend(&tokens[keep_pages * self.page_size..]);
        keep_pages
    }
}

#[cfg(test)]
mod tests {
    use super::super::hash::seq_hashes;
    use super::*;

    fn tokens(n: u32) -> Vec<u32> {
        (0..n)
            .map(|i| i.wrapping_mul(2_654_435_761) % 50_000)
            .collect()
    }

    #[test]
    fn incremental_equals_one_shot_for_any_split() {
        let all = tokens(100);
        let expect = seq_hashes(&all, 16);
        for split in [0, 1, 15, 16, 17, 31, 32, 33, 99, 100] {
            let mut h = BlockHasher::new(16);
            h.extend(&all[..split]);
            h.extend(&all[split..]);
            assert_eq!(h.seq_hashes(), &expect[..], "split at {split}");
            assert_eq!(h.tokens_len(), 100);
        }
    }

    #[test]
    fn byte_by_byte_feeding_matches() {
        let all = tokens(70);
        let mut h = BlockHasher::new(16);
        for t in &all {
            h.extend(std::slice::from_ref(t));
        }
        assert_eq!(h.seq_hashes(), &seq_hashes(&all, 16)[..]);
    }

    #[test]
    fn advance_to_reuses_the_known_prefix() {
        let turn1 = tokens(50);
        let mut turn2 = turn1.clone();
        turn2.extend(tokens(40).iter().map(|t| t + 7));
        let mut h = BlockHasher::from_tokens(16, &turn1);
        let reused = h.advance_to(&turn2, turn1.len());
        assert_eq!(reused, 3);
        assert_eq!(h.seq_hashes(), &seq_hashes(&turn2, 16)[..]);
        assert_eq!(h.tokens_len(), turn2.len());
    }

    #[test]
    fn advance_to_with_a_shorter_known_prefix_rehashes_the_rest() {
        let turn1 = tokens(64);
        let mut turn2 = turn1[..20].to_vec();
        turn2.extend(tokens(60).iter().map(|t| t + 3));
        let mut h = BlockHasher::from_tokens(16, &turn1);
        assert_eq!(h.advance_to(&turn2, 20), 1);
        assert_eq!(h.seq_hashes(), &seq_hashes(&turn2, 16)[..]);
    }
}
