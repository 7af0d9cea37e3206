//! Why the index refused (part of) an event.

use crate::ids::{Rank, WorkerId};

use super::event::EngineHash;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    #[error("worker {worker} rank {rank} is outside the index's id range")]
    UnitOutOfRange { worker: WorkerId, rank: Rank },
    #[error("event page size {got} differs from the index page size {expected}")]
    PageSizeMismatch { expected: u32, got: u32 },
    #[error("BlockStored carries {tokens} tokens for {blocks} blocks of {block_size}")]
    TokenCountMismatch {
        blocks: usize,
        tokens: usize,
        block_size: u32,
    },
    #[error("BlockStored carries {local_hashes} content hashes for {blocks} blocks")]
    HashCountMismatch { blocks: usize, local_hashes: usize },
    /// The store was dropped whole: its parent is not resident on that unit
    /// (missed events; the caller should treat the unit as needing recovery).
    #[error("BlockStored parent {parent:#x} is unknown on this worker rank; store dropped")]
    UnknownParent { parent: EngineHash },
    /// The unit went past its entry cap (the worker's advertised capacity plus
    /// slack): its entries were cleared instead of growing without bound.
    #[error("worker rank holds {blocks} blocks, over its cap of {cap}; rank cleared")]
    CapExceeded { blocks: usize, cap: usize },
}
