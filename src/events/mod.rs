//! KV-event ingestion: turns worker event streams (SGLang ZMQ batches, relayed
//! batches and Dynamo `RouterEvent`s on NATS) into typed [`KvEvent`]s for a
//! [`KvEventSink`], checking a sequence cursor per (worker, rank) on the way
//! (gaps -> replay or clear + recovering, restarts -> clear). See docs/events.md.
//!
//! [`KvEvent`]: crate::index::KvEvent

pub mod cursor;
pub mod dynamo_wire;
pub mod feed;
pub mod metrics;
pub mod sglang_wire;
pub mod sink;

pub use feed::{Outcome, Payload, RankFeed, ResetReason};
pub use sink::{KvEventSink, Record, RecordingSink};
