//! kvrouter-index: which KV blocks sit on which (worker, DP rank), and how a request's tokens
//! name those blocks. No network, no HTTP, no async runtime: the router feeds it decoded events
//! and asks it for overlaps; any other process can do the same.
//!
//! - block identity (`tokens/`): page splitting, xxh3-64 page hashes and chained sequence
//!   hashes bit-identical to Dynamo's ([`seq_hashes`], [`BlockHasher`] for the next turn of a
//!   session, [`NamespaceParts`] for cache salt / LoRA namespaces, [`folds_into`] for worker
//!   page sizes);
//! - the index (`index/`): [`KvIndex`] applies [`KvEvent`]s per [`Unit`] (worker, rank) to
//!   a run-compressed residency (a tree of runs of blocks with the same holders),
//!   answers [`KvIndex::find_matches`] with [`Overlaps`], and keeps the predicted / in-flight
//!   layer ([`IndexBooking`], [`PredictionId`]) with its TTL;
//! - the identifiers units are keyed by (`ids.rs`): [`WorkerId`], [`Rank`] (the router's
//!   `workers` re-exports them);
//! - its Prometheus series (`kvrouter_index_*`) in its own registry, [`metrics_registry`],
//!   which the host process gathers with its own.
//!
//! Design notes and measurements: docs/index.md, docs/benchmarks.md `## KV index`; benches in
//! `benches/` (criterion, the percentile / memory report, and `benches/peers` against the
//! published peer index crates).

#![warn(unreachable_pub)]

mod ids;
mod index;
mod tokens;

pub use ids::{Rank, WorkerId};
pub use index::{
    metrics_registry, Applied, EngineHash, IndexBooking, IndexError, IndexStats, KvEvent, KvIndex,
    Overlaps, Placement, PredictionCalibration, PredictionId, Tier, Unit, UnitOverlap,
    DEFAULT_UNIT_CAP_BLOCKS, MAX_RANK, MAX_WORKER_ID,
};
pub use tokens::{
    chain, folds_into, local_hash, seq_hashes, seq_hashes_in, BlockHash, BlockHasher,
    NamespaceParts, SeqHash, XXH3_SEED,
};
