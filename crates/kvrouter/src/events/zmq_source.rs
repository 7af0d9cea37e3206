//! ZMQ source: one task per (worker, rank) subscribing to the worker's SGLang
//! publisher (SUB socket, reconnecting with backoff), feeding a [`RankFeed`],
//! fetching replays when the feed asks, and handing accepted batches to the relay. With a
//! [`SourceTrust`] it drops what arrives while the endpoint is not trusted (`trust.rs`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use tracing::{debug, warn};
use zeromq::{Socket, SocketEvent, SocketOptions, SocketRecv, SubSocket, ZmqMessage};

use super::feed::{ApplyOutcome, Payload, RankFeed};
use super::handle::{LiveSource, SourceHandle};
use super::metrics::metrics;
use super::relay::RelaySender;
use super::replay::fetch_replay;
use super::sink::KvEventSink;
use super::trust::SourceTrust;
use crate::backoff::ExponentialBackoff;
use crate::workers::{Rank, WorkerId};

pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Resubscribe schedule: 100 ms doubling to 5 s, no jitter.
pub(crate) const RESUBSCRIBE_BACKOFF: ExponentialBackoff =
    ExponentialBackoff::constant(Duration::from_millis(100), Duration::from_secs(5));
/// Per-step timeout of a replay (connect, then each reply).
pub(crate) const REPLAY_TIMEOUT: Duration = Duration::from_secs(2);

/// What to subscribe to for one (worker, rank).
#[derive(Debug, Clone)]
pub struct ZmqSourceConfig {
    pub worker: WorkerId,
    /// The worker's URL: its identity in logs and on the NATS relay.
    pub worker_url: String,
    pub rank: Rank,
    /// Publisher endpoint to dial, e.g. `tcp://10.0.0.5:5557` (see [`super::rank_endpoint`]).
    pub endpoint: String,
    /// The worker's replay (ROUTER) endpoint for this rank, if it has one.
    pub replay_endpoint: Option<String>,
    /// ZMQ topic prefix to subscribe to ("" = everything).
    pub topic: String,
    /// The router's page size; stores of any other block size are rejected loudly.
    pub page_size: u32,
    /// When set, batches are applied only while the worker is trusted (`trust.rs`).
    pub trust: Option<SourceTrust>,
}

impl ZmqSourceConfig {
    /// A config with no replay endpoint and an empty topic filter.
    pub fn new(
        worker: WorkerId,
        worker_url: impl Into<String>,
        rank: Rank,
        endpoint: impl Into<String>,
        page_size: u32,
    ) -> Self {
        Self {
            worker,
            worker_url: worker_url.into(),
            rank,
            endpoint: endpoint.into(),
            replay_endpoint: None,
            topic: String::new(),
            page_size,
            trust: None,
        }
    }

    /// Applies batches only while `trust` admits them.
    pub fn with_trust(mut self, trust: SourceTrust) -> Self {
        self.trust = Some(trust);
        self
    }

    pub fn with_replay(mut self, replay_endpoint: impl Into<String>) -> Self {
        self.replay_endpoint = Some(replay_endpoint.into());
        self
    }

    pub fn with_topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = topic.into();
        self
    }
}

/// Spawner of ZMQ subscriptions.
pub struct ZmqSource;

impl ZmqSource {
    /// Starts subscribing; events go to `sink`, accepted raw batches to `relay`.
    /// Must be called inside a tokio runtime. Drop the handle to stop.
    pub fn spawn(
        tasks: &crate::tasks::Tasks,
        config: ZmqSourceConfig,
        sink: Arc<dyn KvEventSink>,
        relay: Option<RelaySender>,
    ) -> SourceHandle {
        SourceHandle::new(tasks.spawn("zmq source", run(config, sink, relay)))
    }
}

async fn run(mut config: ZmqSourceConfig, sink: Arc<dyn KvEventSink>, relay: Option<RelaySender>) {
    let _live = LiveSource::new();
    let label: Arc<str> = config.worker_url.as_str().into();
    let mut feed = RankFeed::new(config.worker, config.rank, label, config.page_size, 0, sink);
    let mut backoff = RESUBSCRIBE_BACKOFF.start();
    let mut failures = 0u32;
    let mut trust = config.trust.take();
    let mut connected_before = false;
    loop {
        let mut options = SocketOptions::default();
        options.connect_timeout(CONNECT_TIMEOUT);
        let mut socket = SubSocket::with_options(options);
        let mut monitor = socket.monitor();
        let connected = async {
            socket.connect(&config.endpoint).await?;
            socket.subscribe(&config.topic).await
        };
        if let Err(e) = connected.await {
            failures += 1;
            if failures == 1 || failures.is_power_of_two() {
                warn!(worker = %config.worker_url, rank = config.rank, endpoint = %config.endpoint, error = %e, failures, "kv events: cannot subscribe, retrying");
            }
            tokio::time::sleep(backoff.next_delay()).await;
            continue;
        }
        failures = 0;
        backoff.reset();
        if std::mem::replace(&mut connected_before, true) {
            if let Some(t) = trust.as_mut() {
                t.reconnected();
            }
        }
        debug!(worker = %config.worker_url, rank = config.rank, endpoint = %config.endpoint, "kv events: subscribed");
        loop {
            tokio::select! {
                message = socket.recv() => match message {
                    Ok(message) => {
                        if trusted(trust.as_mut()) {
                            on_message(&mut feed, &config, relay.as_ref(), message).await;
                        }
                    }
                    Err(e) => {
                        debug!(worker = %config.worker_url, rank = config.rank, error = %e, "kv events: subscription lost, reconnecting");
                        feed.mark_reconnected();
                        break;
                    }
                },
                Some(event) = monitor.next() => {
                    if let SocketEvent::Disconnected(_) = event {
                        // The socket reconnects by itself; the stream may have restarted,
                        // and whoever answers next on the port may not be the worker.
                        feed.mark_reconnected();
                        if let Some(t) = trust.as_mut() {
                            t.reconnected();
                        }
                    }
                }
            }
        }
        tokio::time::sleep(backoff.current()).await;
    }
}

/// Whether a batch arriving now may be applied (always, without a trust); counts drops.
fn trusted(trust: Option<&mut SourceTrust>) -> bool {
    let Some(t) = trust else { return true };
    match t.check() {
        Ok(()) => true,
        Err(why) => {
            metrics().untrusted.with_label_values(&[why.label()]).inc();
            false
        }
    }
}

/// Splits `[topic, seq, payload]` (or `[seq, payload]`) into seq and payload.
fn split_frames(message: ZmqMessage) -> Option<(u64, Bytes)> {
    let mut frames = message.into_vec();
    let payload = frames.pop()?;
    let seq = frames.pop()?;
    let seq: [u8; 8] = seq.as_ref().try_into().ok()?;
    Some((u64::from_be_bytes(seq), payload))
}

async fn on_message(
    feed: &mut RankFeed,
    config: &ZmqSourceConfig,
    relay: Option<&RelaySender>,
    message: ZmqMessage,
) {
    let Some((seq, payload)) = split_frames(message) else {
        metrics().decode_errors.with_label_values(&["frames"]).inc();
        return;
    };
    metrics().batches.with_label_values(&["zmq"]).inc();
    let outcome = feed.offer(
        seq,
        Payload::Sglang(&payload),
        config.replay_endpoint.is_some(),
    );
    let ApplyOutcome::NeedReplay { from } = outcome else {
        forward(outcome, config, relay, seq, payload);
        return;
    };
    if let Some(endpoint) = &config.replay_endpoint {
        match fetch_replay(endpoint, from, REPLAY_TIMEOUT).await {
            Ok(batches) => {
                metrics().replays.with_label_values(&["ok"]).inc();
                for (replayed_seq, replayed) in batches {
                    metrics().batches.with_label_values(&["replay"]).inc();
                    let outcome = feed.offer(replayed_seq, Payload::Sglang(&replayed), false);
                    forward(outcome, config, relay, replayed_seq, replayed);
                }
            }
            Err(e) => {
                metrics().replays.with_label_values(&["failed"]).inc();
                warn!(worker = %config.worker_url, rank = config.rank, from, error = %e, "kv events: replay failed");
            }
        }
    }
    let outcome = feed.offer(seq, Payload::Sglang(&payload), false);
    forward(outcome, config, relay, seq, payload);
    feed.finish_replay();
}

fn forward(
    outcome: ApplyOutcome,
    config: &ZmqSourceConfig,
    relay: Option<&RelaySender>,
    seq: u64,
    payload: Bytes,
) {
    if let (ApplyOutcome::Applied { reset }, Some(relay)) = (outcome, relay) {
        relay.send(&config.worker_url, config.rank, seq, reset, payload);
    }
}
