//! The per-rank KV cache model: the paged radix tree (with namespaces and the HiCache host
//! tier), its change events and SGLang's block hash.

pub mod block_hash;
pub mod event;
pub mod host;
pub mod host_tier;
pub mod namespace;
pub mod radix;

pub use event::{CacheEvent, Medium};
pub use namespace::Namespace;
pub use radix::{Inserted, NodeId, NsId, RadixCache, PLAIN, ROOT};
