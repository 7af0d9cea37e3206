//! The per-rank KV cache model: the paged radix tree and SGLang's block hash.

pub mod block_hash;
pub mod radix;

pub use radix::{CacheEvent, Inserted, NodeId, RadixCache, ROOT};
