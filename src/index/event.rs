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
    /// Pages evicted (engine hashes; unknown ones are ignored).
    Removed { block_hashes: Vec<EngineHash> },
    /// The rank's whole cache was reset (start, flush, weight update).
    Cleared,
}
