//! `KvRuntime`: the KV index, the KV policy's unit loads and learned rates, and the event sources feeding the
//! index, kept in step with the fleet.
//!
//! - Without `--nats-url`: one `ZmqSource` per (worker, rank) of every registered worker whose
//!   server info has a ZMQ `kv_events_config` (endpoints from `Worker::kv_event_endpoints`).
//! - `--nats-url --publish-events`: the same ZMQ sources, and every accepted batch is relayed to
//!   NATS; the consumer reads only Dynamo `RouterEvent`s (never its own relay).
//! - `--nats-url` alone: no ZMQ; the index is fed by the NATS relay subjects (another router
//!   relays) and Dynamo events. Two such replicas converge to the relay's index.
//!
//! Worker removed: its sources stop first, then `index.remove_worker`. Worker restarted: its
//! ranks are cleared (the cursor also sees the sequence restart). A timer expires predictions
//! and refreshes the index gauges.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::broadcast::error::RecvError;

use super::load::UnitLoads;
use super::timing::TimingModel;
use crate::config::KvConfig;
use crate::events::{
    KvEventSink, NatsConsumer, NatsConsumerConfig, NatsRelay, RelaySender, SourceHandle, WorkerKey,
    ZmqSource, ZmqSourceConfig,
};
use crate::index::KvIndex;
use crate::workers::{Registry, RegistryEvent, Worker, WorkerId};

/// The KV side of a running router (see module docs).
pub struct KvRuntime {
    pub index: Arc<KvIndex>,
    pub loads: Arc<UnitLoads>,
    /// The learned rates the KV policy scores with.
    pub timing: Arc<TimingModel>,
    zmq_enabled: bool,
    sources: Mutex<HashMap<WorkerId, Vec<SourceHandle>>>,
    relay: Mutex<Option<NatsRelay>>,
    nats: Mutex<Option<SourceHandle>>,
}

impl KvRuntime {
    /// Builds the index and starts following `registry` (call inside a tokio runtime, before
    /// workers are registered; already registered ones are picked up too).
    pub fn start(page_size: u32, config: &KvConfig, registry: &Registry) -> Arc<KvRuntime> {
        let rt = Arc::new(KvRuntime {
            index: Arc::new(KvIndex::new(page_size)),
            loads: Arc::new(UnitLoads::default()),
            timing: Arc::new(TimingModel::default()),
            zmq_enabled: config.nats_url.is_none() || config.publish_events,
            sources: Mutex::new(HashMap::new()),
            relay: Mutex::new(None),
            nats: Mutex::new(None),
        });
        let mut events = registry.subscribe();
        let weak = Arc::downgrade(&rt);
        let existing = registry.snapshot();
        let nats = config.nats_url.clone().map(|u| (u, config.publish_events));
        let watch = registry.watch();
        tokio::spawn(async move {
            if let Some((url, publish)) = nats {
                let Some(rt) = weak.upgrade() else { return };
                if let Err(e) = rt.start_nats(&url, publish, watch).await {
                    tracing::error!(nats_url = %url, error = %e, "cannot start the NATS KV event feed");
                }
            }
            if let Some(rt) = weak.upgrade() {
                for w in existing.iter() {
                    rt.worker_added(w);
                }
            }
            loop {
                let ev = match events.recv().await {
                    Ok(ev) => ev,
                    Err(RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "KV runtime lagged behind registry events");
                        continue;
                    }
                    Err(RecvError::Closed) => break,
                };
                let Some(rt) = weak.upgrade() else { break };
                match ev {
                    RegistryEvent::Added(w) => rt.worker_added(&w),
                    RegistryEvent::Removed(w) => rt.worker_removed(w.id),
                    RegistryEvent::Restarted(w) => rt.clear_worker(&w),
                    RegistryEvent::Draining(_) => {}
                }
            }
        });
        spawn_timer(Arc::downgrade(&rt));
        rt
    }

    async fn start_nats(
        &self,
        url: &str,
        publish: bool,
        watch: tokio::sync::watch::Receiver<crate::workers::Snapshot>,
    ) -> anyhow::Result<()> {
        let client = async_nats::connect(url).await?;
        let mut cfg = NatsConsumerConfig::new(self.index.page_size());
        if publish {
            cfg.relay_prefix = None;
            *self.relay.lock() = Some(NatsRelay::start(
                client.clone(),
                crate::events::nats_envelope::DEFAULT_RELAY_PREFIX,
            ));
        }
        let resolver = move |key: WorkerKey<'_>| match key {
            WorkerKey::Url(u) => watch
                .borrow()
                .iter()
                .find(|w| w.url == u.trim_end_matches('/'))
                .map(|w| w.id),
            WorkerKey::Dynamo(_) => None,
        };
        let sink: Arc<dyn KvEventSink> = self.index.clone();
        let handle = NatsConsumer::start(client, cfg, Arc::new(resolver), sink).await?;
        *self.nats.lock() = Some(handle);
        tracing::info!(nats_url = %url, relay = publish, "NATS KV event feed started");
        Ok(())
    }

    fn relay_sender(&self) -> Option<RelaySender> {
        self.relay.lock().as_ref().map(NatsRelay::sender)
    }

    /// Subscribes to every rank of `w` (no-op without ZMQ events or when already subscribed).
    pub fn worker_added(&self, w: &Arc<Worker>) {
        // Cap its index entries at what its KV cache can hold (ZMQ- or NATS-fed alike).
        self.index
            .set_worker_capacity(w.id, w.info.max_total_num_tokens);
        if !self.zmq_enabled {
            return;
        }
        let endpoints = w.kv_event_endpoints();
        if endpoints.is_empty() {
            if w.info.kv_events.is_some() {
                tracing::warn!(worker = %w.url, "worker KV events are not subscribable (publisher off or connect mode); routing by load for it");
            }
            return;
        }
        let mut sources = self.sources.lock();
        if sources.contains_key(&w.id) {
            return;
        }
        let topic = w
            .info
            .kv_events
            .as_ref()
            .map(|k| k.topic.clone())
            .unwrap_or_default();
        let relay = self.relay_sender();
        let handles = endpoints
            .into_iter()
            .map(|(rank, endpoint, replay)| {
                let mut cfg =
                    ZmqSourceConfig::new(w.id, &w.url, rank, endpoint, self.index.page_size())
                        .with_topic(topic.clone());
                if let Some(r) = replay {
                    cfg = cfg.with_replay(r);
                }
                let sink: Arc<dyn KvEventSink> = self.index.clone();
                ZmqSource::spawn(cfg, sink, relay.clone())
            })
            .collect::<Vec<_>>();
        tracing::info!(worker = %w.url, ranks = handles.len(), "subscribed to worker KV events");
        sources.insert(w.id, handles);
    }

    /// Stops `worker`'s sources, then drops it from the index and the load table.
    pub fn worker_removed(&self, worker: WorkerId) {
        drop(self.sources.lock().remove(&worker));
        self.index.remove_worker(worker);
        self.loads.remove_worker(worker);
        self.timing.remove_worker(worker);
    }

    /// `w`'s KV cache is empty (restart, flush, refit): clear all its ranks.
    pub fn clear_worker(&self, w: &Worker) {
        self.index
            .set_worker_capacity(w.id, w.info.max_total_num_tokens);
        for rank in w.ranks() {
            self.index.clear_rank(w.id, rank);
        }
    }

    /// Number of (worker, rank) ZMQ sources running.
    pub fn source_count(&self) -> usize {
        self.sources.lock().values().map(Vec::len).sum()
    }
}

fn spawn_timer(weak: Weak<KvRuntime>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tick.tick().await;
            let Some(rt) = weak.upgrade() else { break };
            rt.index.expire_predictions(Instant::now());
            rt.index.update_gauges();
        }
    });
}
