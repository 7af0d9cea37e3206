//! Dynamo's ZMQ event plane (the default transport of Dynamo 1.6.1's `KvEventPublisher`
//! unless `DYN_EVENT_PLANE=nats`): one task per `--dynamo-zmq-endpoint`, a SUB socket on
//! topic `kv-events` (reconnecting with the ZMQ source's backoff), whose messages are 4
//! frames (`lib/runtime/src/transports/event_plane/zmq_transport.rs`, checked against the
//! bytes in tests/data/dynamo-1.6.1/zmq.jsonl):
//!
//! | frame | content |
//! |---|---|
//! | 0 | topic `kv-events` |
//! | 1 | publisher id, u64 big-endian |
//! | 2 | sequence, u64 big-endian (0-based per publisher; not used: `event_id` is the cursor) |
//! | 3 | `0x01`, u32 big-endian length, then the msgpack `EventEnvelope` |
//!
//! The envelope goes to [`DynamoFeeds`], exactly as a NATS message's payload does.

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use tracing::{debug, warn};
use zeromq::{Socket, SocketEvent, SocketOptions, SocketRecv, SubSocket};

use super::dynamo_feeds::DynamoFeeds;
use super::dynamo_map::DynamoSettings;
use super::handle::{LiveSource, SourceHandle};
use super::metrics::metrics;
use super::sink::KvEventSink;
use super::worker_key::{WorkerKey, WorkerResolver};
use super::zmq_source::{CONNECT_TIMEOUT, RESUBSCRIBE_BACKOFF};
use crate::workers::Snapshot;

/// The topic Dynamo publishes KV events under (`KV_EVENT_SUBJECT`).
pub(crate) const TOPIC: &str = "kv-events";
/// Version byte that starts frame 3.
const FRAME_VERSION: u8 = 0x01;

/// Why a ZMQ message is not a Dynamo event-plane message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FrameError {
    #[error("expected 4 frames, got {0}")]
    Count(usize),
    #[error("topic is not {TOPIC:?}")]
    Topic,
    #[error("publisher id or sequence is not 8 bytes")]
    Header,
    #[error("payload frame: {0}")]
    Payload(&'static str),
}

/// The msgpack envelope inside Dynamo's 4 frames.
pub(crate) fn envelope_of(frames: &[Bytes]) -> Result<&[u8], FrameError> {
    let [topic, publisher, sequence, payload] = frames else {
        return Err(FrameError::Count(frames.len()));
    };
    if topic.as_ref() != TOPIC.as_bytes() {
        return Err(FrameError::Topic);
    }
    if publisher.len() != 8 || sequence.len() != 8 {
        return Err(FrameError::Header);
    }
    let (head, body) = payload
        .split_at_checked(5)
        .ok_or(FrameError::Payload("shorter than its 5-byte header"))?;
    if head[0] != FRAME_VERSION {
        return Err(FrameError::Payload("unknown version byte"));
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
    if usize::try_from(len).ok() != Some(body.len()) {
        return Err(FrameError::Payload("length does not match"));
    }
    Ok(body)
}

/// Spawner of Dynamo ZMQ event-plane subscriptions.
pub(crate) struct DynamoZmqSource;

impl DynamoZmqSource {
    /// Subscribes to the Dynamo publisher at `endpoint` (e.g. `tcp://10.0.0.5:34563`);
    /// events go to `sink` for the workers `resolver` maps. Must be called inside a tokio
    /// runtime. Drop the handle to stop.
    pub(crate) fn spawn(
        tasks: &crate::tasks::Tasks,
        endpoint: String,
        page_size: u32,
        resolver: Arc<dyn WorkerResolver>,
        sink: Arc<dyn KvEventSink>,
    ) -> SourceHandle {
        let feeds = DynamoFeeds::new(page_size, resolver, sink);
        SourceHandle::new(tasks.spawn("dynamo zmq source", run(endpoint, feeds)))
    }
}

/// One [`DynamoZmqSource`] per `settings.zmq_endpoints`, each resolving Dynamo ids with
/// `settings.workers` against the registry's live snapshot (`workers`).
pub(crate) fn spawn_all(
    tasks: &crate::tasks::Tasks,
    settings: &DynamoSettings,
    page_size: u32,
    workers: tokio::sync::watch::Receiver<Snapshot>,
    sink: Arc<dyn KvEventSink>,
) -> Vec<SourceHandle> {
    if settings.zmq_endpoints.is_empty() {
        return Vec::new();
    }
    let map = settings.workers.clone();
    let resolver = move |key: WorkerKey<'_>| match key {
        WorkerKey::Dynamo(id) => map.resolve(&workers.borrow(), id),
        WorkerKey::Url(_) => None,
    };
    let resolver: Arc<dyn WorkerResolver> = Arc::new(resolver);
    let handles: Vec<_> = settings
        .zmq_endpoints
        .iter()
        .map(|e| {
            DynamoZmqSource::spawn(tasks, e.clone(), page_size, resolver.clone(), sink.clone())
        })
        .collect();
    tracing::info!(endpoints = ?settings.zmq_endpoints, "subscribed to Dynamo's ZMQ event plane");
    handles
}

async fn run(endpoint: String, mut feeds: DynamoFeeds) {
    let _live = LiveSource::new();
    let mut backoff = RESUBSCRIBE_BACKOFF.start();
    let mut failures = 0u32;
    let mut warned_frames = false;
    loop {
        let mut options = SocketOptions::default();
        options.connect_timeout(CONNECT_TIMEOUT);
        let mut socket = SubSocket::with_options(options);
        let mut monitor = socket.monitor();
        let connected = async {
            socket.connect(&endpoint).await?;
            socket.subscribe(TOPIC).await
        };
        if let Err(e) = connected.await {
            failures += 1;
            if failures == 1 || failures.is_power_of_two() {
                warn!(endpoint, error = %e, failures, "kv events: cannot subscribe to the Dynamo event plane, retrying");
            }
            tokio::time::sleep(backoff.next_delay()).await;
            continue;
        }
        failures = 0;
        backoff.reset();
        debug!(endpoint, "kv events: subscribed to the Dynamo event plane");
        loop {
            tokio::select! {
                message = socket.recv() => match message {
                    Ok(message) => {
                        let frames = message.into_vec();
                        match envelope_of(&frames) {
                            Ok(envelope) => feeds.on_message("zmq", &endpoint, envelope),
                            Err(e) => {
                                metrics().decode_errors.with_label_values(&["frames"]).inc();
                                if !std::mem::replace(&mut warned_frames, true) {
                                    warn!(endpoint, error = %e, "kv events: malformed Dynamo event-plane message skipped");
                                }
                            }
                        }
                    }
                    Err(e) => {
                        debug!(endpoint, error = %e, "kv events: Dynamo subscription lost, reconnecting");
                        feeds.mark_reconnected();
                        break;
                    }
                },
                Some(event) = monitor.next() => {
                    if let SocketEvent::Disconnected(_) = event {
                        // The socket reconnects by itself; the publisher may have restarted.
                        feeds.mark_reconnected();
                    }
                }
            }
        }
        tokio::time::sleep(backoff.current()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::dynamo_wire::{decode_router_events, tests::fixture_envelopes};

    const ZMQ: &str = include_str!("../../tests/data/dynamo-1.6.1/zmq.jsonl");
    const RELAY: &str = include_str!("../../tests/data/dynamo-1.6.1/relay.jsonl");

    fn unhex(hex: &str) -> Bytes {
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect::<Vec<u8>>()
            .into()
    }

    fn fixture_frames(jsonl: &str) -> Vec<Vec<Bytes>> {
        jsonl
            .lines()
            .map(|line| {
                let row: serde_json::Value = serde_json::from_str(line).unwrap();
                row["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| unhex(f.as_str().unwrap()))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn dynamo_161_frames_carry_the_envelope() {
        for jsonl in [ZMQ, RELAY] {
            let frames = fixture_frames(jsonl);
            let envelopes = fixture_envelopes(jsonl);
            assert_eq!(frames.len(), 6);
            for (message, expected) in frames.iter().zip(&envelopes) {
                let envelope = envelope_of(message).unwrap();
                assert_eq!(envelope, expected.as_slice());
                assert_eq!(decode_router_events(envelope).unwrap().len(), 1);
            }
        }
    }

    #[test]
    fn malformed_frames_are_errors() {
        let good = fixture_frames(ZMQ).remove(0);
        assert_eq!(envelope_of(&good[..3]), Err(FrameError::Count(3)));
        let mut topic = good.clone();
        topic[0] = Bytes::from_static(b"kv-eventsX");
        assert_eq!(envelope_of(&topic), Err(FrameError::Topic));
        let mut header = good.clone();
        header[1] = Bytes::from_static(b"\x01");
        assert_eq!(envelope_of(&header), Err(FrameError::Header));
        let mut short = good.clone();
        short[3] = Bytes::from_static(b"\x01\x00");
        assert!(matches!(envelope_of(&short), Err(FrameError::Payload(_))));
        let mut version = good.clone();
        let mut bytes = version[3].to_vec();
        bytes[0] = 2;
        version[3] = bytes.into();
        assert!(matches!(envelope_of(&version), Err(FrameError::Payload(_))));
        let mut truncated = good.clone();
        truncated[3] = truncated[3].slice(..truncated[3].len() - 1);
        assert!(matches!(
            envelope_of(&truncated),
            Err(FrameError::Payload(_))
        ));
    }
}
