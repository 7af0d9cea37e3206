//! `KvRuntime`: the KV index, the KV policy's unit loads and learned unit rates, and the event
//! sources feeding the index, kept in step with the fleet.
//!
//! - Without `--nats-url`: one `ZmqSource` per (worker, rank) of every registered worker whose
//!   server info has a ZMQ `kv_events` block or `kv_events_config` (endpoints from
//!   `Worker::kv_event_endpoints`: the block first, the config string as the fallback).
//! - `--nats-url --publish-events`: the same ZMQ sources, and every accepted batch is relayed to
//!   NATS; the consumer reads only Dynamo `RouterEvent`s (never its own relay).
//! - `--nats-url` alone: no ZMQ; the index is fed by the NATS relay subjects (another router
//!   relays) and Dynamo events. Two such replicas converge to the relay's index.
//! - `--nats-jetstream` with either: the relay publishes into a JetStream stream (one relay per
//!   worker holds its lock) and a consuming router reads one ordered consumer per registered
//!   worker from the stream's start; `/readiness` waits until each routable worker's feed
//!   has caught up ([`KvRuntime::rebuilding`]).
//!
//! - Any mode: one `LoadSource` per rank of a worker whose `kv_events` block advertises
//!   SGLang's load publisher; its reports join the unit loads (`load.rs`).
//!
//! Every source feeds a `TieredSink` (`sink.rs`): GPU events to the index, host and disk events
//! to the lower tiers' indexes (`tiers.rs`); clears, restarts and removals cover every tier.
//!
//! Worker removed: its sources stop first, then `index.remove_worker`. Worker restarted (a
//! refused connect then a success, or a changed launch marker in `/server_info`): its sources
//! stop, its ranks are cleared and new sources start (the cursor also sees the sequence
//! restart, for restarts the health checks miss). A timer expires predictions
//! and refreshes the index gauges, the units' speed factors (`rates.rs`) and their KV
//! pressure (`pressure.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use kvrouter_index::KvIndex;
use parking_lot::Mutex;
use tokio::sync::broadcast::error::RecvError;

use super::load::UnitLoads;
use super::pressure::UnitPressure;
use super::rates::{RateSettings, UnitRates};
use super::sink::TieredSink;
use super::tiers::LowerTiers;
use crate::config::KvConfig;
use crate::events::{
    CatchUp, JetStreamConfig, JetStreamSetup, JetStreamSource, JetStreamSourceConfig, KvEventSink,
    LoadSink, LoadSource, LoadSourceConfig, LoadStat, NatsConsumer, NatsConsumerConfig, NatsRelay,
    RelaySender, SourceHandle, WorkerKey, ZmqSource, ZmqSourceConfig,
};
use crate::workers::{Registry, RegistryEvent, Worker, WorkerId};

/// The KV side of a running router (see module docs).
pub struct KvRuntime {
    pub index: Arc<KvIndex>,
    /// The host and disk tiers' indexes and credits (`tiers.rs`).
    pub tiers: Arc<LowerTiers>,
    /// What every event source applies to: `index` and `tiers` by the event's tier.
    sink: Arc<dyn KvEventSink>,
    pub loads: Arc<UnitLoads>,
    /// Per-unit prefill / decode rates learned from responses (`rates.rs`).
    pub rates: Arc<UnitRates>,
    /// Per-unit KV use and eviction rates sampled from the index (`pressure.rs`).
    pub pressure: Arc<UnitPressure>,
    zmq_enabled: bool,
    sources: Mutex<HashMap<WorkerId, Vec<SourceHandle>>>,
    /// Engine load feeds (SGLang's load publisher), one per rank of workers advertising one.
    load_sources: Mutex<HashMap<WorkerId, Vec<SourceHandle>>>,
    relay: Mutex<Option<NatsRelay>>,
    nats: Mutex<Option<SourceHandle>>,
    /// JetStream consumer mode: the stream (and its subject prefix) per-worker feeds read.
    js_stream: Mutex<
        Option<(
            async_nats::Client,
            async_nats::jetstream::stream::Stream,
            String,
        )>,
    >,
    /// JetStream consumer mode: each worker's feed and whether it has caught up.
    js_feeds: Mutex<HashMap<WorkerId, (SourceHandle, Arc<CatchUp>)>>,
    js_consumer: bool,
    /// One source per `--dynamo-zmq-endpoint` (Dynamo's ZMQ event plane); dropping stops them.
    _dynamo_zmq: Vec<SourceHandle>,
}

impl KvRuntime {
    /// Builds the index and starts following `registry` (call inside a tokio runtime, before
    /// workers are registered; already registered ones are picked up too).
    pub fn start(page_size: u32, config: &KvConfig, registry: &Registry) -> Arc<KvRuntime> {
        let index = Arc::new(KvIndex::new(page_size));
        let tiers = LowerTiers::new(page_size, config.tier_credit);
        let sink: Arc<dyn KvEventSink> = Arc::new(TieredSink {
            gpu: index.clone(),
            tiers: tiers.clone(),
        });
        let rt = Arc::new(KvRuntime {
            index: index.clone(),
            tiers,
            sink: sink.clone(),
            loads: Arc::new(UnitLoads::default()),
            rates: Arc::new(UnitRates::new(RateSettings {
                enabled: config.learn_rates,
                tolerance: config.rate_tolerance,
                ..RateSettings::default()
            })),
            pressure: Arc::new(UnitPressure::default()),
            zmq_enabled: config.nats_url.is_none() || config.publish_events,
            sources: Mutex::new(HashMap::new()),
            load_sources: Mutex::new(HashMap::new()),
            relay: Mutex::new(None),
            nats: Mutex::new(None),
            js_stream: Mutex::new(None),
            js_feeds: Mutex::new(HashMap::new()),
            js_consumer: config.jetstream.is_some() && !config.publish_events,
            _dynamo_zmq: crate::events::dynamo_zmq::spawn_all(
                &config.dynamo,
                page_size,
                registry.watch(),
                sink,
            ),
        });
        let mut events = registry.subscribe();
        let weak = Arc::downgrade(&rt);
        let existing = registry.snapshot();
        let nats = config.nats_url.clone().map(|u| (u, config.publish_events));
        let nats_auth = config.nats_auth.clone();
        let jetstream = config.jetstream.clone();
        let dynamo = config.dynamo.clone();
        let watch = registry.watch();
        tokio::spawn(async move {
            if let Some((url, publish)) = nats {
                let Some(rt) = weak.upgrade() else { return };
                if let Err(e) = rt
                    .start_nats(&url, &nats_auth, publish, jetstream, dynamo, watch)
                    .await
                {
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
                    RegistryEvent::Restarted(w) => rt.worker_restarted(&w),
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
        auth: &crate::events::nats_auth::NatsAuth,
        publish: bool,
        jetstream: Option<JetStreamConfig>,
        dynamo: crate::events::dynamo_map::DynamoSettings,
        watch: tokio::sync::watch::Receiver<crate::workers::Snapshot>,
    ) -> anyhow::Result<()> {
        let client = auth.connect(url).await?;
        let mut cfg = NatsConsumerConfig::new(self.index.page_size());
        if !dynamo.subjects.is_empty() {
            cfg.dynamo_subjects = dynamo.subjects.clone();
        }
        if let Some(js) = jetstream {
            // Relayed batches come from the stream (per worker); core NATS keeps Dynamo only.
            cfg.relay_prefix = None;
            let setup = JetStreamSetup::open(client.clone(), js).await?;
            if publish {
                let instance = crate::events::relay_lock::instance_id();
                *self.relay.lock() = Some(NatsRelay::start_jetstream(setup, instance).await?);
            } else {
                let prefix = setup.config.prefix.clone();
                *self.js_stream.lock() = Some((client.clone(), setup.stream, prefix));
            }
        } else if publish {
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
            WorkerKey::Dynamo(id) => dynamo.workers.resolve(&watch.borrow(), id),
        };
        let sink = self.sink.clone();
        let handle = NatsConsumer::start(client, cfg, Arc::new(resolver), sink).await?;
        *self.nats.lock() = Some(handle);
        tracing::info!(nats_url = %url, relay = publish, auth = auth.kind(), "NATS KV event feed started");
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
        self.start_load_feed(w);
        if self.js_consumer {
            self.start_jetstream_feed(w);
            return;
        }
        if !self.zmq_enabled {
            return;
        }
        let endpoints = w.kv_event_endpoints();
        if endpoints.is_empty() {
            if w.info.kv_events.is_some() || w.info.kv_events_block.is_some() {
                tracing::warn!(worker = %w.url, "worker KV events are not subscribable (publisher off or connect mode); routing by load for it");
            }
            return;
        }
        let mut sources = self.sources.lock();
        if sources.contains_key(&w.id) {
            return;
        }
        let topic = w.kv_event_topic();
        let relay = self.relay_sender();
        let handles = endpoints
            .into_iter()
            .map(|(rank, endpoint, replay)| {
                let mut cfg =
                    ZmqSourceConfig::new(w.id, &w.url, rank, endpoint, self.index.page_size())
                        .with_topic(topic.clone())
                        .with_trust(crate::events::SourceTrust::new(w));
                if let Some(r) = replay {
                    cfg = cfg.with_replay(r);
                }
                let sink = self.sink.clone();
                ZmqSource::spawn(cfg, sink, relay.clone())
            })
            .collect::<Vec<_>>();
        tracing::info!(worker = %w.url, ranks = handles.len(), "subscribed to worker KV events");
        sources.insert(w.id, handles);
    }

    /// One load source per rank of `w` when its `kv_events` block advertises SGLang's load
    /// publisher (`load_endpoint_port_base`), whatever feeds the index.
    fn start_load_feed(&self, w: &Arc<Worker>) {
        let Some(block) = w.info.kv_events_block.as_ref() else {
            return;
        };
        let mut feeds = self.load_sources.lock();
        if feeds.contains_key(&w.id) {
            return;
        }
        let topic = block
            .load_topic
            .clone()
            .unwrap_or_else(|| "load".to_string());
        let sink: Arc<dyn LoadSink> = Arc::new(EngineLoadSink {
            loads: self.loads.clone(),
            page: u64::from(self.index.page_size().max(1)),
        });
        let handles: Vec<SourceHandle> = w
            .ranks()
            .filter_map(|rank| {
                let endpoint = block.load_endpoint(&w.host, rank)?;
                let cfg = LoadSourceConfig {
                    worker: w.id,
                    worker_url: w.url.clone(),
                    rank,
                    endpoint,
                    topic: topic.clone(),
                };
                Some(LoadSource::spawn(cfg, sink.clone()))
            })
            .collect();
        if !handles.is_empty() {
            tracing::info!(worker = %w.url, ranks = handles.len(), "subscribed to worker load reports");
            feeds.insert(w.id, handles);
        }
    }

    /// JetStream consumer mode: one ordered consumer over `w`'s subjects, from the start.
    fn start_jetstream_feed(&self, w: &Arc<Worker>) {
        let Some((client, stream, prefix)) = self.js_stream.lock().clone() else {
            return;
        };
        let mut feeds = self.js_feeds.lock();
        if feeds.contains_key(&w.id) {
            return;
        }
        let cfg = JetStreamSourceConfig {
            worker: w.id,
            worker_url: w.url.clone(),
            prefix,
            page_size: self.index.page_size(),
        };
        let sink = self.sink.clone();
        feeds.insert(w.id, JetStreamSource::spawn(client, stream, cfg, sink));
        tracing::info!(worker = %w.url, "reading worker KV events from JetStream");
    }

    /// JetStream consumer mode: why the router is not ready yet (a routable worker whose
    /// feed has not replayed the stream), or None.
    pub fn rebuilding(&self, registry: &Registry) -> Option<String> {
        if !self.js_consumer {
            return None;
        }
        let feeds = self.js_feeds.lock();
        let behind = registry
            .snapshot()
            .iter()
            .filter(|w| w.is_routable())
            .filter(|w| !feeds.get(&w.id).is_some_and(|(_, c)| c.is_caught_up()))
            .count();
        (behind > 0).then(|| format!("KV index rebuilding from JetStream ({behind} workers)"))
    }

    /// Stops `worker`'s sources, then drops it from the index and the load table.
    pub fn worker_removed(&self, worker: WorkerId) {
        drop(self.js_feeds.lock().remove(&worker));
        drop(self.sources.lock().remove(&worker));
        drop(self.load_sources.lock().remove(&worker));
        self.index.remove_worker(worker);
        self.tiers.remove_worker(worker);
        self.loads.remove_worker(worker);
        self.rates.remove_worker(worker);
        self.pressure.remove_worker(worker);
    }

    /// A new process behind `w`'s URL: its ZMQ sources are stopped, its ranks cleared, and new
    /// sources started (fresh cursors: the first batch they see is replayed from 0 when the
    /// worker has a replay endpoint), so nothing of the old incarnation's stream is kept.
    /// JetStream feeds keep reading (the stream orders both incarnations); the clear is enough.
    pub fn worker_restarted(&self, w: &Arc<Worker>) {
        let stopped = self.sources.lock().remove(&w.id);
        let loads = self.load_sources.lock().remove(&w.id);
        let resubscribe = stopped.is_some() || loads.is_some();
        drop((stopped, loads));
        self.loads.forget_reports(w.id);
        self.clear_worker(w);
        if resubscribe {
            self.worker_added(w);
        }
    }

    /// `w`'s KV cache is empty (restart, flush, refit): clear all its ranks.
    pub fn clear_worker(&self, w: &Worker) {
        self.index
            .set_worker_capacity(w.id, w.info.max_total_num_tokens);
        for rank in w.ranks() {
            self.index.clear_rank(w.id, rank);
            self.tiers.clear_rank(w.id, rank);
        }
    }

    /// Number of (worker, rank) ZMQ sources running.
    pub fn source_count(&self) -> usize {
        self.sources.lock().values().map(Vec::len).sum()
    }

    /// Number of (worker, rank) engine load sources running.
    pub fn load_source_count(&self) -> usize {
        self.load_sources.lock().values().map(Vec::len).sum()
    }
}

/// Folds load reports into the unit loads: running + waiting requests, and the KV tokens in
/// use plus queued (`num_total_tokens`) in router blocks. An engine with no request reports no
/// block load (its KV in use then is reserved or cached pages, not work ahead of a request).
struct EngineLoadSink {
    loads: Arc<UnitLoads>,
    page: u64,
}

impl LoadSink for EngineLoadSink {
    fn report(&self, worker: WorkerId, rank: crate::workers::Rank, stat: &LoadStat) {
        let requests = stat.num_running_reqs.saturating_add(stat.num_waiting_reqs);
        let blocks = if requests == 0 {
            0
        } else {
            stat.num_total_tokens.max(stat.num_tokens) / self.page
        };
        self.loads.report(worker, rank, requests, blocks);
    }
}

fn spawn_timer(weak: Weak<KvRuntime>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tick.tick().await;
            let Some(rt) = weak.upgrade() else { break };
            let now = Instant::now();
            rt.index.expire_predictions(now);
            rt.index.update_gauges();
            super::metrics::set_tier_blocks(&rt.index, &rt.tiers);
            rt.rates.refresh();
            rt.pressure.refresh(&rt.index, now);
        }
    });
}
