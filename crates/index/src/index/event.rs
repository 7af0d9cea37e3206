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

/// The storage tier an event's blocks live in: SGLang's `StorageMedium`
/// (`disaggregation/kv_events.py`: `GPU`, `CPU_PINNED`, `DISK`, `EXTERNAL`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Tier {
    /// Device memory (`GPU`, or no `medium`): a hit needs no load.
    #[default]
    Gpu,
    /// Host memory (HiCache L2, `CPU_PINNED`; `CPU` accepted too): loaded back over PCIe.
    Host,
    /// Storage (`DISK`, L3) or a shared remote pool (`EXTERNAL`, L4): slower to load back.
    Disk,
}

impl Tier {
    /// The tier of a `medium` string (ASCII case-insensitive; `None` = the GPU tier);
    /// `None` for a medium the router does not know.
    pub fn from_medium(medium: Option<&str>) -> Option<Tier> {
        let Some(m) = medium else {
            return Some(Tier::Gpu);
        };
        let is = |name: &str| m.eq_ignore_ascii_case(name);
        if is("GPU") {
            Some(Tier::Gpu)
        } else if is("CPU_PINNED") || is("CPU") {
            Some(Tier::Host)
        } else if is("DISK") || is("EXTERNAL") {
            Some(Tier::Disk)
        } else {
            None
        }
    }
}

/// Where an event's blocks belong: their namespace (see `tokens::namespace`; only stores
/// use it) and their tier. The default is today's only case: GPU, default namespace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Placement {
    /// The namespace key, the virtual parent of a chain's first page (`None` = default).
    pub namespace: Option<crate::tokens::SeqHash>,
    pub tier: Tier,
}

impl Placement {
    /// GPU tier, default namespace.
    pub const GPU: Placement = Placement {
        namespace: None,
        tier: Tier::Gpu,
    };

    pub fn is_default(&self) -> bool {
        *self == Placement::GPU
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sglang_media_map_to_tiers() {
        assert_eq!(Tier::from_medium(None), Some(Tier::Gpu));
        assert_eq!(Tier::from_medium(Some("GPU")), Some(Tier::Gpu));
        assert_eq!(Tier::from_medium(Some("CPU_PINNED")), Some(Tier::Host));
        assert_eq!(Tier::from_medium(Some("cpu")), Some(Tier::Host));
        assert_eq!(Tier::from_medium(Some("DISK")), Some(Tier::Disk));
        assert_eq!(Tier::from_medium(Some("EXTERNAL")), Some(Tier::Disk));
        assert_eq!(Tier::from_medium(Some("NVRAM")), None);
        assert!(Placement::default().is_default());
    }
}

/// What applying one event changed (`KvIndex::apply`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// (block, unit) entries added.
    pub stored: usize,
    /// (block, unit) entries removed.
    pub removed: usize,
    /// Blocks already in the requested state (duplicates, unknown removals).
    pub unchanged: usize,
}
