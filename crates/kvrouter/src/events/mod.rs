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

pub mod cursor;
pub mod dynamo_feeds;
pub mod dynamo_map;
pub mod dynamo_wire;
pub mod dynamo_zmq;
pub mod endpoint;
pub mod feed;
pub mod fold;
pub mod handle;
pub mod jetstream;
mod js_relay;
pub mod js_source;
pub mod load_source;
pub mod load_wire;
pub mod metrics;
pub mod nats_auth;
pub mod nats_envelope;
pub mod nats_source;
pub mod relay;
pub mod relay_lock;
pub mod replay;
pub mod runtime;
pub mod sglang_wire;
pub mod sink;
pub mod trust;
pub mod zmq_source;

pub use endpoint::rank_endpoint;
pub use feed::{ApplyOutcome, Payload, RankFeed, ResetReason};
pub use handle::SourceHandle;
pub use jetstream::{JetStreamConfig, JetStreamSetup};
pub use js_source::{CatchUp, JetStreamSource, JetStreamSourceConfig};
pub use load_source::{LoadSink, LoadSource, LoadSourceConfig};
pub use load_wire::LoadStat;
pub use nats_source::{NatsConsumer, NatsConsumerConfig, WorkerKey, WorkerResolver};
pub use relay::{NatsRelay, RelaySender};
pub use sink::{Absorbed, KvEventSink, Record, RecordingSink};
pub use trust::{Distrust, SourceTrust};
pub use zmq_source::{ZmqSource, ZmqSourceConfig};
