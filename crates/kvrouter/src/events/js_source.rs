//! JetStream consumer of one worker's relayed batches (`<prefix>.<worker-key>.>`): an
//! ordered consumer per router replica and worker, delivering the whole retained stream
//! first, so a router that starts or restarts rebuilds the worker's index from it. Each
//! rank goes through its own [`RankFeed`] (same cursor rules as the core NATS consumer:
//! `Kvr-Reset` clears, a sequence gap clears and marks recovering).
//!
//! Ordered rather than durable: the index lives in memory, so a restarted router must
//! read the stream from its start again; a durable consumer's acknowledged position would
//! skip exactly what it needs. The feed is *caught up* once it has delivered as many
//! messages as the consumer had pending when it was created (or the server reports none
//! pending); [`CatchUp`] tells `/readiness`.
//!
//! After a NATS reconnect (server restart) the consumer is recreated at once from the
//! next stream sequence instead of waiting for missed heartbeats (about 15 s).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
use async_nats::jetstream::stream::Stream;
use futures::StreamExt;
use tracing::{info, warn};

use super::feed::{Payload, RankFeed};
use super::handle::{LiveSource, SourceHandle};
use super::metrics::metrics;
use super::nats_envelope::{self, worker_key};
use super::sink::KvEventSink;
use crate::backoff::ExponentialBackoff;
use crate::workers::{Rank, WorkerId};

/// Whether a feed has replayed the stream up to where it stood at start.
#[derive(Debug, Default)]
pub struct CatchUp(AtomicBool);

impl CatchUp {
    pub fn is_caught_up(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    fn set(&self) {
        if !self.0.swap(true, Ordering::AcqRel) {
            metrics().nats.catching_up.dec();
        }
    }
}

/// What one worker's JetStream feed reads.
#[derive(Debug, Clone)]
pub struct JetStreamSourceConfig {
    pub worker: WorkerId,
    pub worker_url: String,
    /// Subject prefix of the stream (`<prefix>.<worker-key>.<rank>`).
    pub prefix: String,
    pub page_size: u32,
}

/// Starter of per-worker JetStream feeds.
pub struct JetStreamSource;

impl JetStreamSource {
    /// Spawns the feed; drop the handle to stop it. The [`CatchUp`] turns true once the
    /// retained stream has been applied.
    pub fn spawn(
        tasks: &crate::tasks::Tasks,
        client: async_nats::Client,
        stream: Stream,
        config: JetStreamSourceConfig,
        sink: Arc<dyn KvEventSink>,
    ) -> (SourceHandle, Arc<CatchUp>) {
        let catch_up = Arc::new(CatchUp::default());
        metrics().nats.catching_up.inc();
        let run = run(client, stream, config, sink, catch_up.clone());
        let task = tasks.spawn("jetstream source", run);
        (SourceHandle::new(task), catch_up)
    }
}

/// Ends a feed's catch-up when its task ends early (worker removed), so `/readiness` does
/// not wait for it.
struct CatchUpGuard(Arc<CatchUp>);

impl Drop for CatchUpGuard {
    fn drop(&mut self) {
        self.0.set();
    }
}

async fn run(
    client: async_nats::Client,
    stream: Stream,
    config: JetStreamSourceConfig,
    sink: Arc<dyn KvEventSink>,
    catch_up: Arc<CatchUp>,
) {
    let _live = LiveSource::new();
    let _guard = CatchUpGuard(catch_up.clone());
    let filter = format!("{}.{}.>", config.prefix, worker_key(&config.worker_url));
    let mut reader = Reader {
        config: &config,
        sink,
        feeds: HashMap::new(),
        warned: false,
    };
    let backoff = ExponentialBackoff::new(Duration::from_millis(100), Duration::from_secs(5), 0.2)
        .unwrap_or_else(|e| unreachable!("constant backoff: {e}"));
    let mut failures = 0u32;
    // Stream sequence to resume from after the consumer had to be recreated.
    let mut next: Option<u64> = None;
    loop {
        let consumer = match create_consumer(&stream, &filter, next).await {
            Ok(c) => c,
            Err(e) => {
                if failures == 0 {
                    warn!(worker = %config.worker_url, error = %e, "kv events: cannot create the JetStream consumer; retrying");
                }
                tokio::time::sleep(backoff.delay(failures)).await;
                failures = failures.saturating_add(1);
                continue;
            }
        };
        let pending = match consumer.get_info().await {
            Ok(info) => info.num_pending,
            Err(_) => 0,
        };
        if pending == 0 {
            catch_up.set();
        }
        let messages = match consumer.messages().await {
            Ok(m) => m,
            Err(e) => {
                warn!(worker = %config.worker_url, error = %e, "kv events: JetStream consumer stream failed; recreating");
                tokio::time::sleep(backoff.delay(failures)).await;
                failures = failures.saturating_add(1);
                continue;
            }
        };
        failures = 0;
        let consumed = Consumed {
            pending,
            catch_up: &catch_up,
            next: &mut next,
        };
        consume(&client, messages, &mut reader, consumed).await;
        tokio::time::sleep(backoff.delay(failures)).await;
        failures = failures.saturating_add(1);
    }
}

/// An ordered consumer of `filter` from the stream's start, or from `next` when resuming.
async fn create_consumer(
    stream: &Stream,
    filter: &str,
    next: Option<u64>,
) -> Result<OrderedConsumer, async_nats::jetstream::stream::ConsumerError> {
    let deliver_policy = match next {
        None => DeliverPolicy::All,
        Some(start_sequence) => DeliverPolicy::ByStartSequence { start_sequence },
    };
    stream
        .create_consumer(OrderedConfig {
            filter_subject: filter.to_string(),
            deliver_policy,
            ..Default::default()
        })
        .await
}

type OrderedConsumer = async_nats::jetstream::consumer::Consumer<OrderedConfig>;

/// Where one consumer's messages stand against the feed's catch-up.
struct Consumed<'a> {
    /// Messages the consumer had pending when it was created.
    pending: u64,
    catch_up: &'a CatchUp,
    /// The stream sequence after the last message read (where a new consumer resumes).
    next: &'a mut Option<u64>,
}

/// Reads `messages` into `reader` until the consumer ends or NATS reconnected (then the
/// consumer must be recreated), finishing the catch-up once the backlog is applied.
async fn consume(
    client: &async_nats::Client,
    mut messages: async_nats::jetstream::consumer::pull::Ordered,
    reader: &mut Reader<'_>,
    c: Consumed<'_>,
) {
    let config = reader.config;
    let worker_url = &config.worker_url;
    let mut delivered = 0u64;
    let mut check = tokio::time::interval(Duration::from_millis(250));
    let stats = client.statistics();
    let connects = stats.connects.load(Ordering::Relaxed);
    loop {
        let message = tokio::select! {
            m = messages.next() => m,
            _ = check.tick() => {
                if client.connection_state() == State::Connected
                    && stats.connects.load(Ordering::Relaxed) != connects
                {
                    info!(worker = %worker_url, "kv events: NATS reconnected; recreating the JetStream consumer");
                    break;
                }
                continue;
            }
        };
        let Some(message) = message else {
            warn!(worker = %worker_url, "kv events: JetStream consumer ended; recreating");
            break;
        };
        let message = match message {
            Ok(m) => m,
            Err(e) => {
                warn!(worker = %worker_url, error = %e, "kv events: JetStream consumer error");
                continue;
            }
        };
        let left = match message.info() {
            Ok(info) => {
                *c.next = Some(info.stream_sequence + 1);
                info.pending
            }
            Err(_) => u64::MAX,
        };
        reader.on_message(message.message);
        delivered += 1;
        if !c.catch_up.is_caught_up() && (left == 0 || delivered >= c.pending) {
            c.catch_up.set();
            info!(worker = %worker_url, batches = delivered, "kv events: index rebuilt from JetStream");
        }
    }
}

struct Reader<'a> {
    config: &'a JetStreamSourceConfig,
    sink: Arc<dyn KvEventSink>,
    feeds: HashMap<Rank, RankFeed>,
    warned: bool,
}

impl Reader<'_> {
    fn on_message(&mut self, message: async_nats::Message) {
        let Some(batch) = nats_envelope::decode_counted(message, "jetstream", &mut self.warned)
        else {
            return;
        };
        if batch.worker_url.trim_end_matches('/') != self.config.worker_url.trim_end_matches('/') {
            // Another URL with the same 64-bit key: not this worker.
            metrics().nats.unknown_worker.inc();
            return;
        }
        let config = self.config;
        let sink = &self.sink;
        let feed = self.feeds.entry(batch.rank).or_insert_with(|| {
            RankFeed::new(
                config.worker,
                batch.rank,
                config.worker_url.as_str().into(),
                config.page_size,
                0,
                sink.clone(),
            )
        });
        if let Some(reason) = batch.reset {
            feed.reset(reason);
        }
        feed.offer(batch.seq, Payload::Sglang(&batch.payload), false);
    }
}
