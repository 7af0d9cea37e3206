//! Block identity: page splitting, xxh3 content hashes of full pages and chained
//! sequence hashes, bit-identical to Dynamo's `compute_block_hash_for_seq` /
//! `compute_seq_hash_for_block` (xxh3-64, seed 1337, little-endian u32 tokens).
//!
//! - [`hash::local_hash`] / [`hash::chain`]: the two primitive hashes;
//! - [`hash::seq_hashes`]: one-shot hashing of a prompt;
//! - [`hasher::BlockHasher`]: incremental hashing that extends a previous chain
//!   with only the new tokens (the next turn of a session);
//! - [`namespace::NamespaceParts`]: the namespace key (cache salt, LoRA adapter) mixed
//!   in before a chain's first page;
//! - [`pages::folds_into`]: which worker page sizes tile the router's pages.

mod hash;
mod hasher;
mod namespace;
mod pages;

pub(crate) use hash::next_seq;
#[cfg(test)]
pub(crate) use hash::seq_hashes_into;
pub use hash::{chain, local_hash, seq_hashes, seq_hashes_in, BlockHash, SeqHash, XXH3_SEED};
pub use hasher::BlockHasher;
pub use namespace::NamespaceParts;
pub use pages::folds_into;
