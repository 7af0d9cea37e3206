//! Deterministic synthetic token ids: the same `(seed, domain, id, position)` always
//! gives the same token, so identical blocks are identical across runs and processes.

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Lowest token id produced (stays clear of special tokens such as 0/1/2).
pub const VOCAB_START: u32 = 1000;
/// Number of distinct token ids produced.
pub const VOCAB_SIZE: u32 = 30_000;

/// Independent token namespaces, so e.g. GRPO prompt 3 never equals agent session 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Domain {
    /// The prefix shared by every request of a workload.
    SystemPrefix = 1,
    /// The unique tail of one GRPO group's prompt.
    GrpoPrompt = 2,
    /// One agent session's first user prompt.
    AgentPrompt = 3,
    /// Tool output appended after one agent turn.
    ToolOutput = 4,
    /// Stand-in model output when a response carries no token ids.
    ModelOutput = 5,
    /// One Mooncake trace hash id.
    TraceBlock = 6,
    /// Padding past a trace entry's last hash id.
    TraceTail = 7,
    /// The unique tail of one rollout prompt (batch << 32 | prompt).
    RolloutPrompt = 8,
    /// One tenant's system prompt.
    TenantSystem = 9,
    /// One tenants-workload request's user suffix.
    UserSuffix = 10,
}

/// The token at `position` of block `id` in `domain`.
pub fn token(seed: u64, domain: Domain, id: u64, position: u64) -> u32 {
    let mut key = [0u8; 24];
    key[..8].copy_from_slice(&(domain as u64).to_le_bytes());
    key[8..16].copy_from_slice(&id.to_le_bytes());
    key[16..].copy_from_slice(&position.to_le_bytes());
    VOCAB_START + (xxh3_64_with_seed(&key, seed) % u64::from(VOCAB_SIZE)) as u32
}

/// Appends the first `len` tokens of block `id` in `domain`.
pub fn extend(out: &mut Vec<u32>, seed: u64, domain: Domain, id: u64, len: usize) {
    out.extend((0..len as u64).map(|p| token(seed, domain, id, p)));
}

/// The first `len` tokens of block `id` in `domain`.
pub fn block(seed: u64, domain: Domain, id: u64, len: usize) -> Vec<u32> {
    let mut out = Vec::with_capacity(len);
    extend(&mut out, seed, domain, id, len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_deterministic_and_distinct() {
        let a = block(7, Domain::TraceBlock, 3, 64);
        assert_eq!(a, block(7, Domain::TraceBlock, 3, 64));
        assert_ne!(a, block(8, Domain::TraceBlock, 3, 64), "seed matters");
        assert_ne!(a, block(7, Domain::TraceBlock, 4, 64), "id matters");
        assert_ne!(a, block(7, Domain::TraceTail, 3, 64), "domain matters");
        assert_eq!(&a[..10], &block(7, Domain::TraceBlock, 3, 10)[..]);
    }

    #[test]
    fn tokens_stay_in_the_vocabulary() {
        let b = block(1, Domain::ModelOutput, 0, 10_000);
        assert!(b
            .iter()
            .all(|&t| (VOCAB_START..VOCAB_START + VOCAB_SIZE).contains(&t)));
    }
}
