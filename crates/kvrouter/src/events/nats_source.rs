//! NATS consumer: reads relayed SGLang batches (`<prefix>.>`, see `nats_envelope`)
//! and Dynamo `RouterEvent`s (Dynamo's `kv-events` subjects), maps each message's
//! worker identity (URL, or Dynamo instance id) to this router's `WorkerId`
//! through a [`WorkerResolver`], and feeds one [`RankFeed`] per (worker, rank).

use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::{select_all, BoxStream};
use futures::StreamExt;
use tracing::warn;

use super::dynamo_wire::decode_router_event;
use super::feed::{Payload, RankFeed};
use super::handle::{LiveSource, SourceHandle};
use super::metrics::metrics;
use super::nats_envelope::{self, DEFAULT_DYNAMO_SUBJECT, DEFAULT_RELAY_PREFIX};
use super::sink::KvEventSink;
use crate::workers::{Rank, WorkerId};

/// How a NATS message names its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerKey<'a> {
    /// Worker URL (relayed SGLang batches): the same on every router replica.
    Url(&'a str),
    /// Dynamo instance id (`RouterEvent.worker_id`).
    Dynamo(u64),
}

/// Maps a message's worker identity to this router's `WorkerId` (None: unknown,
/// the message is counted and dropped). Any `Fn(WorkerKey) -> Option<WorkerId>`
/// closure is a resolver.
pub trait WorkerResolver: Send + Sync + 'static {
    fn resolve(&self, key: WorkerKey<'_>) -> Option<WorkerId>;
}

impl<F> WorkerResolver for F
where
    F: Fn(WorkerKey<'_>) -> Option<WorkerId> + Send + Sync + 'static,
{
    fn resolve(&self, key: WorkerKey<'_>) -> Option<WorkerId> {
        self(key)
    }
}

/// What to consume.
#[derive(Debug, Clone)]
pub struct NatsConsumerConfig {
    /// Prefix of relayed SGLang batches (subscribes to `<prefix>.>`); None = off.
    pub relay_prefix: Option<String>,
    /// Subject of Dynamo `RouterEvent`s (wildcards allowed); None = off.
    pub dynamo_subject: Option<String>,
    /// The router's page size (checked against relayed SGLang stores).
    pub page_size: u32,
}

impl NatsConsumerConfig {
    /// Both feeds on their default subjects.
    pub fn new(page_size: u32) -> Self {
        Self {
            relay_prefix: Some(DEFAULT_RELAY_PREFIX.to_owned()),
            dynamo_subject: Some(DEFAULT_DYNAMO_SUBJECT.to_owned()),
            page_size,
        }
    }
}

/// Starter of NATS consumers.
pub struct NatsConsumer;

#[derive(Clone, Copy)]
enum Feed {
    Relay,
    Dynamo,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum FeedKey {
    Url(String, Rank),
    Dynamo(u64, Rank),
}

impl NatsConsumer {
    /// Subscribes (the subscriptions are registered on the server when this
    /// returns) and spawns the consuming task. Drop the handle to stop.
    pub async fn start(
        client: async_nats::Client,
        config: NatsConsumerConfig,
        resolver: Arc<dyn WorkerResolver>,
        sink: Arc<dyn KvEventSink>,
    ) -> anyhow::Result<SourceHandle> {
        let mut streams: Vec<BoxStream<'static, (Feed, async_nats::Message)>> = Vec::new();
        if let Some(prefix) = &config.relay_prefix {
            let sub = client.subscribe(format!("{prefix}.>")).await?;
            streams.push(sub.map(|m| (Feed::Relay, m)).boxed());
        }
        if let Some(subject) = &config.dynamo_subject {
            let sub = client.subscribe(subject.clone()).await?;
            streams.push(sub.map(|m| (Feed::Dynamo, m)).boxed());
        }
        client.flush().await?;
        let mut consumer = Consumer {
            page_size: config.page_size,
            resolver,
            sink,
            feeds: HashMap::new(),
            warned_envelope: false,
        };
        let task = tokio::spawn(async move {
            let _live = LiveSource::new();
            let mut messages = select_all(streams);
            while let Some((feed, message)) = messages.next().await {
                match feed {
                    Feed::Relay => consumer.on_relayed(message),
                    Feed::Dynamo => consumer.on_dynamo(message),
                }
            }
            warn!("kv events: NATS subscriptions ended");
        });
        Ok(SourceHandle::new(task))
    }
}

struct Consumer {
    page_size: u32,
    resolver: Arc<dyn WorkerResolver>,
    sink: Arc<dyn KvEventSink>,
    feeds: HashMap<FeedKey, RankFeed>,
    warned_envelope: bool,
}

impl Consumer {
    /// The feed of `key` for `worker` (a new one if the worker was re-registered
    /// under another id), or None (counted) when the worker is unknown.
    fn feed(
        &mut self,
        key: FeedKey,
        worker: Option<WorkerId>,
        label: &str,
        origin: u64,
    ) -> Option<&mut RankFeed> {
        let Some(worker) = worker else {
            metrics().unknown_worker.inc();
            self.feeds.remove(&key);
            return None;
        };
        let rank = match key {
            FeedKey::Url(_, rank) | FeedKey::Dynamo(_, rank) => rank,
        };
        let fresh = || {
            RankFeed::new(
                worker,
                rank,
                label.into(),
                self.page_size,
                origin,
                self.sink.clone(),
            )
        };
        let feed = self.feeds.entry(key).or_insert_with(fresh);
        if feed.worker() != worker {
            *feed = RankFeed::new(
                worker,
                rank,
                label.into(),
                self.page_size,
                origin,
                self.sink.clone(),
            );
        }
        Some(feed)
    }

    fn on_relayed(&mut self, message: async_nats::Message) {
        let Some(batch) = nats_envelope::decode_counted(message, "nats", &mut self.warned_envelope)
        else {
            return;
        };
        let worker = self.resolver.resolve(WorkerKey::Url(&batch.worker_url));
        let key = FeedKey::Url(batch.worker_url.clone(), batch.rank);
        let Some(feed) = self.feed(key, worker, &batch.worker_url, 0) else {
            return;
        };
        if let Some(reason) = batch.reset {
            feed.reset(reason);
        }
        feed.offer(batch.seq, Payload::Sglang(&batch.payload), false);
    }

    fn on_dynamo(&mut self, message: async_nats::Message) {
        let event = match decode_router_event(&message.payload) {
            Ok(event) => event,
            Err(e) => {
                metrics().decode_errors.with_label_values(&["dynamo"]).inc();
                if !std::mem::replace(&mut self.warned_envelope, true) {
                    warn!(subject = %message.subject, error = %e, "kv events: undecodable Dynamo event skipped");
                }
                return;
            }
        };
        metrics().batches.with_label_values(&["nats"]).inc();
        let worker = self.resolver.resolve(WorkerKey::Dynamo(event.worker_id));
        let label = format!("dynamo:{}", event.worker_id);
        let key = FeedKey::Dynamo(event.worker_id, event.dp_rank);
        if let Some(feed) = self.feed(key, worker, &label, 1) {
            feed.offer(event.event_id, Payload::Dynamo(&event), false);
        }
    }
}
