//! The primitive hashes: a page's content hash and the position chain.

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Seed of every kvrouter / Dynamo block hash.
pub const XXH3_SEED: u64 = 1337;

/// Content hash of one full page (Dynamo's `LocalBlockHash`).
pub type BlockHash = u64;

/// Content + position identity of a page: the chained hash of all pages up to
/// and including it (Dynamo's `SequenceHash`). The index is keyed by these.
pub type SeqHash = u64;

/// Content hash of one page: xxh3-64 (seed 1337) over its tokens as little-endian u32.
#[inline]
pub fn local_hash(page: &[u32]) -> BlockHash {
    #[cfg(target_endian = "little")]
    {
        // On little-endian targets the tokens' memory is their little-endian encoding.
        xxh3_64_with_seed(bytemuck::cast_slice(page), XXH3_SEED)
    }
    #[cfg(not(target_endian = "little"))]
    {
        let bytes: Vec<u8> = page.iter().flat_map(|t| t.to_le_bytes()).collect();
        xxh3_64_with_seed(&bytes, XXH3_SEED)
    }
}

/// The sequence hash of a page whose parent has sequence hash `parent`:
/// xxh3-64 (seed 1337) over `le(parent) ++ le(local)`.
#[inline]
pub fn chain(parent: SeqHash, local: BlockHash) -> SeqHash {
    let mut buf = [0u8; 16];
    buf[..8].copy_from_slice(&parent.to_le_bytes());
    buf[8..].copy_from_slice(&local.to_le_bytes());
    xxh3_64_with_seed(&buf, XXH3_SEED)
}

/// The sequence hash of a page at `parent` (None = first page of a sequence).
#[inline]
pub(crate) fn next_seq(parent: Option<SeqHash>, local: BlockHash) -> SeqHash {
    match parent {
        Some(p) => chain(p, local),
        None => local,
    }
}

/// Sequence hashes of every full page of `tokens` (a trailing partial page is ignored).
pub fn seq_hashes(tokens: &[u32], page_size: usize) -> Vec<SeqHash> {
    let mut out = Vec::with_capacity(tokens.len() / page_size.max(1));
    seq_hashes_into(None, tokens, page_size, &mut out);
    out
}

/// Sequence hashes of every full page of `tokens` in namespace `namespace` (the namespace
/// key, `tokens::namespace`, chained before the first page; `None` = [`seq_hashes`]).
pub fn seq_hashes_in(namespace: Option<SeqHash>, tokens: &[u32], page_size: usize) -> Vec<SeqHash> {
    let mut out = Vec::with_capacity(tokens.len() / page_size.max(1));
    seq_hashes_into(namespace, tokens, page_size, &mut out);
    out
}

/// Appends to `out` the sequence hashes of the full pages of `tokens`, chained
/// after `parent`; returns the last sequence hash (or `parent` if no full page).
pub(crate) fn seq_hashes_into(
    parent: Option<SeqHash>,
    tokens: &[u32],
    page_size: usize,
    out: &mut Vec<SeqHash>,
) -> Option<SeqHash> {
    if page_size == 0 {
        return parent;
    }
    let mut prev = parent;
    out.reserve(tokens.len() / page_size);
    for page in tokens.chunks_exact(page_size) {
        let seq = next_seq(prev, local_hash(page));
        out.push(seq);
        prev = Some(seq);
    }
    prev
}

#[cfg(test)]
mod tests {
    use super::*;

    // Dynamo's published vectors (lib/tokens/src/lib.rs, seed 1337, block size 4).
    const HASH_1_4: u64 = 14643705804678351452;
    const HASH_5_8: u64 = 16777012769546811212;
    const SEQ_HASH_5_8: u64 = 4945711292740353085;
    const HASH_9_12: u64 = 483935686894639516;
    const SEQ_HASH_9_12: u64 = 12583592247330656132;

    #[test]
    fn local_hashes_match_dynamo_vectors() {
        assert_eq!(local_hash(&[1, 2, 3, 4]), HASH_1_4);
        assert_eq!(local_hash(&[5, 6, 7, 8]), HASH_5_8);
        assert_eq!(local_hash(&[9, 10, 11, 12]), HASH_9_12);
    }

    #[test]
    fn sequence_hashes_match_dynamo_vectors() {
        let tokens: Vec<u32> = (1..=12).collect();
        assert_eq!(
            seq_hashes(&tokens, 4),
            vec![HASH_1_4, SEQ_HASH_5_8, SEQ_HASH_9_12]
        );
        assert_eq!(chain(HASH_1_4, HASH_5_8), SEQ_HASH_5_8);
        assert_eq!(chain(SEQ_HASH_5_8, HASH_9_12), SEQ_HASH_9_12);
    }

    #[test]
    fn partial_trailing_page_is_ignored() {
        let tokens: Vec<u32> = (1..=14).collect();
        assert_eq!(seq_hashes(&tokens, 4).len(), 3);
        assert!(seq_hashes(&tokens[..3], 4).is_empty());
        assert!(seq_hashes(&tokens, 0).is_empty());
    }

    #[test]
    fn same_page_at_another_position_gets_another_sequence_hash() {
        let a = seq_hashes(&[7, 7, 7, 7, 7, 7, 7, 7], 4);
        assert_eq!(local_hash(&[7, 7, 7, 7]), a[0]);
        assert_ne!(a[0], a[1]);
    }

    #[test]
    fn little_endian_encoding_is_explicit() {
        let bytes: Vec<u8> = [1u32, 2, 3, 4]
            .iter()
            .flat_map(|t| t.to_le_bytes())
            .collect();
        assert_eq!(xxh3_64_with_seed(&bytes, XXH3_SEED), HASH_1_4);
    }
}
