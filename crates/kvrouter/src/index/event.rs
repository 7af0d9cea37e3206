//! The index's input language: one KV-cache event of one (worker, rank), already
//! decoded from whatever wire format carried it (SGLang msgpack, Dynamo JSON).
//!
//! Engine hashes are opaque per-worker keys (used for removal and parent lookup);
//! the index recomputes its own content hashes from `token_ids`.

/// An engine's block hash, bit-cast to u64 (SGLang sends signed int64).
pub type EngineHash = u64;

/// One KV-cache change reported by a worker rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvEvent {
    /// Full pages newly resident. `token_ids` holds `block_hashes.len() * block_size`
    /// tokens, page by page; `parent` is the engine hash of the page before the first
    /// one (None when the first page starts the sequence).
    Stored {
        parent: Option<EngineHash>,
        block_hashes: Vec<EngineHash>,
        token_ids: Vec<u32>,
        block_size: u32,
    },
    /// Full pages newly resident, announced with content hashes instead of tokens
    /// (Dynamo `RouterEvent`s carry no token ids). `local_hashes[i]` is the
    /// router's own per-page content hash of page `i` (xxh3-64, seed 1337, tokens
    /// as little-endian u32: Dynamo's `tokens_hash` / `LocalBlockHash`), so the index
    /// chains them exactly as it would hash `token_ids`. Both vectors have one entry
    /// per page, in order; `parent` is as in `Stored`.
    StoredHashed {
        parent: Option<EngineHash>,
        block_hashes: Vec<EngineHash>,
        local_hashes: Vec<u64>,
    },
    /// Pages evicted (engine hashes; unknown ones are ignored).
    Removed { block_hashes: Vec<EngineHash> },
    /// The rank's whole cache was reset (start, flush, weight update).
    Cleared,
}
