//! KV-event ingestion: turns worker event streams (SGLang ZMQ batches, relayed
//! batches and Dynamo `RouterEvent`s on NATS) into typed [`KvEvent`]s for a
//! [`KvEventSink`], checking a sequence cursor per (worker, rank) on the way
//! (gap -> replay, or clear + recovering; restart -> clear), and folding the pages of a
//! worker whose page size divides the router's into router blocks. See docs/events.md.
//!
//! Entry points: [`ZmqSource::spawn`] per (worker, rank), [`NatsConsumer::start`]
//! once per router with NATS, [`NatsRelay::start`] in relay mode; with JetStream
//! (`--nats-jetstream`): [`JetStreamSetup::open`], [`NatsRelay::start_jetstream`] and
//! [`JetStreamSource::spawn`] per worker.
//!
//! [`KvEvent`]: kvrouter_index::KvEvent

pub(crate) mod cursor;
pub(crate) mod dynamo_feeds;
pub(crate) mod dynamo_map;
pub mod dynamo_wire;
pub(crate) mod dynamo_zmq;
pub(crate) mod endpoint;
pub(crate) mod feed;
pub(crate) mod fold;
pub(crate) mod handle;
pub(crate) mod jetstream;
mod js_relay;
pub(crate) mod js_source;
pub(crate) mod load_source;
pub(crate) mod load_wire;
pub mod metrics;
pub(crate) mod nats_auth;
pub mod nats_envelope;
pub(crate) mod nats_source;
pub(crate) mod relay;
pub(crate) mod relay_lock;
pub(crate) mod replay;
pub(crate) mod runtime;
pub mod sglang_wire;
pub(crate) mod sink;
pub(crate) mod trust;
mod worker_key;
pub(crate) mod zmq_source;

pub use endpoint::rank_endpoint;
pub use feed::{ApplyOutcome, Payload, RankFeed, ResetReason};
pub use handle::SourceHandle;
pub use jetstream::{JetStreamConfig, JetStreamSetup};
pub use js_source::{CatchUp, JetStreamSource, JetStreamSourceConfig};
pub use load_source::{LoadSink, LoadSource, LoadSourceConfig};
pub use load_wire::LoadStat;
pub use nats_source::{NatsConsumer, NatsConsumerConfig};
pub use relay::{NatsRelay, RelaySender};
pub use sink::{Absorbed, KvEventSink, Record, RecordingSink};
pub use trust::{Distrust, SourceTrust};
pub use worker_key::{WorkerKey, WorkerResolver};
pub use zmq_source::{ZmqSource, ZmqSourceConfig};
