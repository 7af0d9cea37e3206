//! The cache's change records in SGLang's event vocabulary (`BlockStored`, `BlockRemoved`,
//! `AllBlocksCleared` of `disaggregation/kv_events.py`) and the storage medium they name.

/// Where a block lives (SGLang's `StorageMedium`, `disaggregation/kv_events.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Medium {
    /// Device memory: `"GPU"`.
    Gpu,
    /// The HiCache host tier: `"CPU_PINNED"` (`StorageMedium.CPU`).
    CpuPinned,
}

impl Medium {
    /// The string SGLang puts in the event's `medium` field.
    pub fn as_str(self) -> &'static str {
        match self {
            Medium::Gpu => "GPU",
            Medium::CpuPinned => "CPU_PINNED",
        }
    }
}

/// A change to the set of resident pages.
#[derive(Debug, Clone, PartialEq)]
pub enum CacheEvent {
    /// Pages newly resident: their hashes, the hash of the preceding page (`None` at the
    /// root), all their tokens, the tier, and the namespace labels SGLang publishes
    /// (`cache_salt`, `lora_name`; `None` = omitted from the event).
    Stored {
        hashes: Vec<i64>,
        parent: Option<i64>,
        tokens: Vec<u32>,
        medium: Medium,
        cache_salt: Option<String>,
        lora_name: Option<String>,
    },
    /// Pages evicted from `medium`.
    Removed { hashes: Vec<i64>, medium: Medium },
    /// Everything dropped.
    Cleared,
}

impl CacheEvent {
    /// A GPU store without namespace labels.
    pub fn stored(hashes: Vec<i64>, parent: Option<i64>, tokens: Vec<u32>) -> CacheEvent {
        CacheEvent::Stored {
            hashes,
            parent,
            tokens,
            medium: Medium::Gpu,
            cache_salt: None,
            lora_name: None,
        }
    }

    /// A GPU removal.
    pub fn removed(hashes: Vec<i64>) -> CacheEvent {
        CacheEvent::Removed {
            hashes,
            medium: Medium::Gpu,
        }
    }
}
