//! The event-source runtime: which sources feed the KV index, kept in step with the fleet.
//! It only starts and stops sources; what the KV side does with their events and with the
//! fleet's changes is behind [`KvEventSink`], [`LoadSink`] and [`FleetKv`]
//! (`routing::kv::KvRuntime` implements them).
//!
//! The mode ([`mode::FeedMode`], `mode.rs`) comes from the configuration:
//! - without `--nats-url`: one `ZmqSource` per (worker, rank) of every registered worker whose
//!   server info has a ZMQ `kv_events` block or `kv_events_config` (endpoints from
//!   `Worker::kv_event_endpoints`: the block first, the config string as the fallback);
//! - `--nats-url --publish-events`: the same ZMQ sources, and every accepted batch is relayed
//!   to NATS; the consumer reads only Dynamo `RouterEvent`s (never its own relay);
//! - `--nats-url` alone: no ZMQ; the index is fed by the NATS relay subjects (another router
//!   relays) and Dynamo events. Two such replicas converge to the relay's index;
//! - `--nats-jetstream` with either: the relay publishes into a JetStream stream (one relay
//!   per worker holds its lock) and a consuming router reads one ordered consumer per
//!   registered worker from the stream's start; `/readiness` waits until each routable
//!   worker's feed has caught up ([`EventSources::rebuilding`]).
//!
//! In any mode: one `LoadSource` per rank of a worker whose `kv_events` block advertises
//! SGLang's load publisher, and one Dynamo ZMQ source per `--dynamo-zmq-endpoint`.
//!
//! Worker removed: its sources stop first, then the KV side forgets it. Worker restarted (a
//! refused connect then a success, or a changed launch marker in `/server_info`): its sources
//! stop, the KV side clears its ranks and new sources start (`workers.rs`; the cursor also
//! sees the sequence restart, for restarts the health checks miss). NATS: `nats.rs`.

mod mode;
mod nats;
mod settings;
mod workers;

pub(crate) use settings::FeedSettings;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;
use tokio::sync::broadcast::error::RecvError;

use self::mode::FeedMode;
use super::{KvEventSink, LoadSink, SourceHandle};
use crate::tasks::Tasks;
use crate::workers::{Registry, RegistryEvent, Snapshot, Worker, WorkerId};

/// What the KV side does when the fleet changes (the sources have been started or stopped
/// around each call as its docs say).
pub trait FleetKv: Send + Sync {
    /// `w` joined (or is re-subscribed): cap its index entries at what its KV cache holds.
    fn worker_added(&self, w: &Worker);
    /// `worker` left; its sources are stopped.
    fn worker_removed(&self, worker: WorkerId);
    /// A new process behind `w`'s URL; its ZMQ and load sources are stopped.
    fn worker_restarted(&self, w: &Worker);
}

/// Where the sources' output goes.
pub struct Targets {
    /// Decoded KV events (every tier).
    pub sink: Arc<dyn KvEventSink>,
    /// Engine load reports.
    pub loads: Arc<dyn LoadSink>,
    /// Fleet changes.
    pub fleet: Arc<dyn FleetKv>,
}

/// The running event sources (see module docs); dropping it stops them.
pub struct EventSources {
    mode: FeedMode,
    page_size: u32,
    tasks: Tasks,
    sink: Arc<dyn KvEventSink>,
    load_sink: Arc<dyn LoadSink>,
    fleet: Arc<dyn FleetKv>,
    watch: tokio::sync::watch::Receiver<Snapshot>,
    /// The core NATS consumer, once connected (any mode with `--nats-url`).
    nats: OnceLock<SourceHandle>,
    /// ZMQ sources, one per rank of each subscribed worker.
    zmq: Mutex<HashMap<WorkerId, Vec<SourceHandle>>>,
    /// Engine load feeds (SGLang's load publisher), one per rank of workers advertising one.
    loads: Mutex<HashMap<WorkerId, Vec<SourceHandle>>>,
    /// One source per `--dynamo-zmq-endpoint` (Dynamo's ZMQ event plane).
    _dynamo_zmq: Vec<SourceHandle>,
}

impl EventSources {
    /// Starts the sources for `config` and follows `registry` (call before workers are
    /// registered; already registered ones are picked up too).
    pub fn start(
        tasks: &Tasks,
        page_size: u32,
        config: &FeedSettings,
        registry: &Registry,
        targets: Targets,
    ) -> Arc<EventSources> {
        let sources = Arc::new(EventSources {
            mode: FeedMode::of(config),
            page_size,
            tasks: tasks.clone(),
            _dynamo_zmq: super::dynamo_zmq::spawn_all(
                tasks,
                &config.dynamo,
                page_size,
                registry.watch(),
                targets.sink.clone(),
            ),
            sink: targets.sink,
            load_sink: targets.loads,
            fleet: targets.fleet,
            watch: registry.watch(),
            nats: OnceLock::new(),
            zmq: Mutex::new(HashMap::new()),
            loads: Mutex::new(HashMap::new()),
        });
        let follow = follow(Arc::downgrade(&sources), config.clone(), registry);
        tasks.spawn("kv event sources", follow);
        sources
    }

    /// JetStream consumer mode: why the router is not ready yet (a routable worker whose
    /// feed has not replayed the stream), or None.
    pub fn rebuilding(&self, registry: &Registry) -> Option<String> {
        let FeedMode::JetStream(js) = &self.mode else {
            return None;
        };
        let feeds = js.feeds.lock();
        let behind = registry
            .routable()
            .iter()
            .filter(|w| !feeds.get(&w.id).is_some_and(|(_, c)| c.is_caught_up()))
            .count();
        (behind > 0).then(|| format!("KV index rebuilding from JetStream ({behind} workers)"))
    }

    /// Number of (worker, rank) ZMQ sources running.
    pub fn source_count(&self) -> usize {
        self.zmq.lock().values().map(Vec::len).sum()
    }

    /// Number of (worker, rank) engine load sources running.
    pub fn load_source_count(&self) -> usize {
        self.loads.lock().values().map(Vec::len).sum()
    }
}

/// Connects NATS (when configured), picks up the registered workers, then applies the
/// registry's events until the sources or the registry are gone.
fn follow(
    weak: Weak<EventSources>,
    config: FeedSettings,
    registry: &Registry,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let mut events = registry.subscribe();
    let existing = registry.snapshot();
    async move {
        if let Some(sources) = weak.upgrade() {
            sources.start_nats(&config).await;
            for w in existing.iter() {
                sources.worker_added(w);
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
            let Some(sources) = weak.upgrade() else { break };
            match ev {
                RegistryEvent::Added(w) => sources.worker_added(&w),
                RegistryEvent::Removed(w) => sources.worker_removed(w.id),
                RegistryEvent::Restarted(w) => sources.worker_restarted(&w),
                RegistryEvent::Draining(_) => {}
            }
        }
    }
}
