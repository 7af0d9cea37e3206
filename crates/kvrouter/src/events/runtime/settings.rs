//! `FeedSettings`: what the event-source runtime reads of the configuration (the NATS server
//! and its credentials, the relay, JetStream, Dynamo); `config::kv` validates and builds it.

use crate::events::dynamo_map::DynamoSettings;
use crate::events::nats_auth::NatsAuth;
use crate::events::JetStreamConfig;

/// The validated feed options (`--nats-url` and friends, `--publish-events`,
/// `--nats-jetstream`, `--dynamo-*`).
#[derive(Debug, Clone, PartialEq)]
pub struct FeedSettings {
    pub nats_url: Option<String>,
    /// How to authenticate to NATS (`--nats-creds` and friends; `events::nats_auth`).
    pub nats_auth: NatsAuth,
    pub publish_events: bool,
    /// `--nats-jetstream`: the stream and relay-lock settings (None: core NATS).
    pub jetstream: Option<JetStreamConfig>,
    /// `--dynamo-kv-subject`, `--dynamo-worker-id`, `--dynamo-zmq-endpoint`.
    pub dynamo: DynamoSettings,
}
