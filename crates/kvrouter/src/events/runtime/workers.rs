//! Each worker's event sources: its ZMQ sources (one per rank, in the ZMQ modes), its
//! JetStream feed (JetStream consumer mode) and its engine load sources (any mode, when its
//! `kv_events` block advertises SGLang's load publisher); started when the worker joins,
//! stopped before it leaves, restarted with a new process behind its URL.

use std::sync::Arc;

use super::mode::FeedMode;
use super::EventSources;
use crate::events::{
    JetStreamSource, JetStreamSourceConfig, LoadSource, LoadSourceConfig, SourceHandle,
    SourceTrust, ZmqSource, ZmqSourceConfig,
};
use crate::workers::{Worker, WorkerId};

impl EventSources {
    /// Starts `w`'s sources (no-op for those already running).
    pub(super) fn worker_added(&self, w: &Arc<Worker>) {
        self.fleet.worker_added(w);
        self.start_load_feed(w);
        if let FeedMode::JetStream(_) = self.mode {
            self.start_jetstream_feed(w);
            return;
        }
        if self.mode.reads_zmq() {
            self.start_zmq(w);
        }
    }

    /// Subscribes to every rank of `w`'s ZMQ publisher.
    fn start_zmq(&self, w: &Arc<Worker>) {
        let endpoints = w.kv_event_endpoints();
        if endpoints.is_empty() {
            if w.info.kv_events.is_some() || w.info.kv_events_block.is_some() {
                tracing::warn!(worker = %w.url, "worker KV events are not subscribable (publisher off or connect mode); routing by load for it");
            }
            return;
        }
        let mut sources = self.zmq.lock();
        if sources.contains_key(&w.id) {
            return;
        }
        let topic = w.kv_event_topic();
        let relay = self.mode.relay_sender();
        let handles = endpoints
            .into_iter()
            .map(|(rank, endpoint, replay)| {
                let mut cfg = ZmqSourceConfig::new(w.id, &w.url, rank, endpoint, self.page_size)
                    .with_topic(topic.clone())
                    .with_trust(SourceTrust::new(w));
                if let Some(r) = replay {
                    cfg = cfg.with_replay(r);
                }
                ZmqSource::spawn(&self.tasks, cfg, self.sink.clone(), relay.clone())
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
        let mut feeds = self.loads.lock();
        if feeds.contains_key(&w.id) {
            return;
        }
        let topic = block
            .load_topic
            .clone()
            .unwrap_or_else(|| "load".to_string());
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
                Some(LoadSource::spawn(&self.tasks, cfg, self.load_sink.clone()))
            })
            .collect();
        if !handles.is_empty() {
            tracing::info!(worker = %w.url, ranks = handles.len(), "subscribed to worker load reports");
            feeds.insert(w.id, handles);
        }
    }

    /// JetStream consumer mode: one ordered consumer over `w`'s subjects, from the start.
    fn start_jetstream_feed(&self, w: &Arc<Worker>) {
        let FeedMode::JetStream(js) = &self.mode else {
            return;
        };
        let Some(stream) = js.stream.get().cloned() else {
            return;
        };
        let mut feeds = js.feeds.lock();
        if feeds.contains_key(&w.id) {
            return;
        }
        let cfg = JetStreamSourceConfig {
            worker: w.id,
            worker_url: w.url.clone(),
            prefix: stream.prefix,
            page_size: self.page_size,
        };
        let sink = self.sink.clone();
        let feed = JetStreamSource::spawn(&self.tasks, stream.client, stream.stream, cfg, sink);
        feeds.insert(w.id, feed);
        tracing::info!(worker = %w.url, "reading worker KV events from JetStream");
    }

    /// Stops `worker`'s sources, then tells the KV side it left.
    pub(super) fn worker_removed(&self, worker: WorkerId) {
        if let FeedMode::JetStream(js) = &self.mode {
            drop(js.feeds.lock().remove(&worker));
        }
        drop(self.zmq.lock().remove(&worker));
        drop(self.loads.lock().remove(&worker));
        self.fleet.worker_removed(worker);
    }

    /// A new process behind `w`'s URL: its ZMQ and load sources are stopped, the KV side
    /// clears its ranks, and new sources start (fresh cursors: the first batch they see is
    /// replayed from 0 when the worker has a replay endpoint), so nothing of the old
    /// incarnation's stream is kept. JetStream feeds keep reading (the stream orders both
    /// incarnations); the clear is enough.
    pub(super) fn worker_restarted(&self, w: &Arc<Worker>) {
        let stopped = self.zmq.lock().remove(&w.id);
        let loads = self.loads.lock().remove(&w.id);
        let resubscribe = stopped.is_some() || loads.is_some();
        drop((stopped, loads));
        self.fleet.worker_restarted(w);
        if resubscribe {
            self.worker_added(w);
        }
    }
}
