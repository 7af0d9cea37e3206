//! `FeedMode`: which event sources feed the KV index, one variant per configuration
//! (`--nats-url`, `--publish-events`, `--nats-jetstream`), with what that mode holds once
//! NATS is connected (each slot is set once, by the connect in `nats.rs`).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use super::FeedSettings;
use crate::events::{CatchUp, NatsRelay, RelaySender, SourceHandle};
use crate::workers::WorkerId;

/// The stream a JetStream consumer reads, with its subject prefix.
#[derive(Clone)]
pub(super) struct JsStream {
    pub client: async_nats::Client,
    pub stream: async_nats::jetstream::stream::Stream,
    pub prefix: String,
}

/// The feed mode (see the module docs of `events::runtime`).
pub(super) enum FeedMode {
    /// No `--nats-url`: one ZMQ source per (worker, rank).
    Zmq,
    /// `--nats-url --publish-events`: the ZMQ sources, and every accepted batch relayed to
    /// NATS (core, or JetStream with `--nats-jetstream`); the relay once connected.
    Relay(OnceLock<NatsRelay>),
    /// `--nats-url` alone: no ZMQ; the core NATS consumer (relay subjects, Dynamo events).
    Nats,
    /// `--nats-url --nats-jetstream` alone: one ordered consumer per worker over the stream.
    JetStream(Box<JsFeeds>),
}

/// JetStream consumer mode: the stream once connected, and each worker's feed.
#[derive(Default)]
pub(super) struct JsFeeds {
    pub stream: OnceLock<JsStream>,
    /// Each worker's feed and whether it has caught up with the stream.
    pub feeds: Mutex<HashMap<WorkerId, (SourceHandle, Arc<CatchUp>)>>,
}

impl FeedMode {
    pub(super) fn of(config: &FeedSettings) -> FeedMode {
        match (&config.nats_url, config.publish_events, &config.jetstream) {
            (None, _, _) => FeedMode::Zmq,
            (Some(_), true, _) => FeedMode::Relay(OnceLock::new()),
            (Some(_), false, None) => FeedMode::Nats,
            (Some(_), false, Some(_)) => FeedMode::JetStream(Box::default()),
        }
    }

    /// True when the mode subscribes to the workers' ZMQ publishers.
    pub(super) fn reads_zmq(&self) -> bool {
        matches!(self, FeedMode::Zmq | FeedMode::Relay(_))
    }

    /// Where accepted ZMQ batches are relayed (relay mode, once connected).
    pub(super) fn relay_sender(&self) -> Option<RelaySender> {
        match self {
            FeedMode::Relay(relay) => relay.get().map(NatsRelay::sender),
            _ => None,
        }
    }
}
