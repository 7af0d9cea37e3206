//! The HiCache host tier's size, policy and occupancy: the state a radix tree keeps when the
//! host tier is on (`RadixCache::enable_host`; the tier's behaviour is in `host.rs`).

/// Size and policy of the host tier.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostTier {
    /// Host pool size in pages (`--hicache-ratio` x device pages).
    pub capacity_pages: usize,
    /// `--hicache-write-policy write_through` (SGLang's default): back up every new node;
    /// `write_back`: back up only on device eviction.
    pub write_through: bool,
    /// Pages currently held on the host.
    pub used_pages: usize,
}
