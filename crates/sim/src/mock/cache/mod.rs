//! The per-rank KV cache model: the paged radix tree, its change events and SGLang's
//! block hash.

pub mod block_hash;
pub mod event;
pub mod radix;

pub use event::{CacheEvent, Medium};
pub use radix::{Inserted, NodeId, RadixCache, ROOT};
