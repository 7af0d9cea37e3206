//! NATS consumer: reads relayed SGLang batches (`<prefix>.>`, see `nats_envelope`)
//! and Dynamo `RouterEvent`s (Dynamo's `kv-events` subjects), maps each message's
//! worker identity (URL, or Dynamo instance id) to this router's `WorkerId`
//! through a [`WorkerResolver`], and feeds one [`RankFeed`] per (worker, rank) (Dynamo
//! batches through [`DynamoFeeds`], shared with the Dynamo ZMQ plane).

use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::{select_all, BoxStream};
use futures::StreamExt;
use tracing::warn;

use super::dynamo_feeds::DynamoFeeds;
use super::feed::{Payload, RankFeed};
use super::handle::{LiveSource, SourceHandle};
use super::metrics::metrics;
use super::nats_envelope::{self, DEFAULT_DYNAMO_SUBJECTS, DEFAULT_RELAY_PREFIX};
use super::sink::KvEventSink;
use super::worker_key::{WorkerKey, WorkerResolver};
use crate::workers::{Rank, WorkerId};

/// What to consume.
#[derive(Debug, Clone)]
pub struct NatsConsumerConfig {
    /// Prefix of relayed SGLang batches (subscribes to `<prefix>.>`); None = off.
    pub relay_prefix: Option<String>,
    /// Subjects of Dynamo `RouterEvent`s (wildcards allowed); empty = off.
    pub dynamo_subjects: Vec<String>,
    /// The router's page size (checked against relayed SGLang stores).
    pub page_size: u32,
}

impl NatsConsumerConfig {
    /// Both feeds on their default subjects.
    pub fn new(page_size: u32) -> Self {
        Self {
            relay_prefix: Some(DEFAULT_RELAY_PREFIX.to_owned()),
            dynamo_subjects: DEFAULT_DYNAMO_SUBJECTS.map(str::to_owned).to_vec(),
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
}

impl NatsConsumer {
    /// Subscribes (the subscriptions are registered on the server when this
    /// returns) and spawns the consuming task. Drop the handle to stop.
    pub async fn start(
        tasks: &crate::tasks::Tasks,
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
        for subject in &config.dynamo_subjects {
            let sub = client.subscribe(subject.clone()).await?;
            streams.push(sub.map(|m| (Feed::Dynamo, m)).boxed());
        }
        client.flush().await?;
        let mut consumer = Consumer {
            page_size: config.page_size,
            dynamo: DynamoFeeds::new(config.page_size, resolver.clone(), sink.clone()),
            resolver,
            sink,
            feeds: HashMap::new(),
            warned_envelope: false,
        };
        let task = tasks.spawn("nats kv events", async move {
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
    dynamo: DynamoFeeds,
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
            metrics().nats.unknown_worker.inc();
            self.feeds.remove(&key);
            return None;
        };
        let FeedKey::Url(_, rank) = key;
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
        self.dynamo
            .on_message("nats", message.subject.as_str(), &message.payload);
    }
}
