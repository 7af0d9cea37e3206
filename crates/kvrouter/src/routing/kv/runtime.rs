//! `KvRuntime`: the KV index, the lower tiers, the KV policy's unit loads, learned unit rates
//! and KV pressure, and the event sources feeding them (`events::runtime`, which starts and
//! stops the sources as the fleet changes and tells this side through [`FleetKv`]).
//!
//! Every source feeds a `TieredSink` (`sink.rs`): GPU events to the index, host and disk events
//! to the lower tiers' indexes (`tiers.rs`); clears, restarts and removals cover every tier.
//! Engine load reports join the unit loads (`EngineLoadSink`, `sink.rs`). A timer expires
//! predictions and refreshes the index gauges, the units' speed factors (`rates.rs`) and
//! their KV pressure (`pressure.rs`).

use std::sync::{Arc, Weak};
use std::time::Duration;

use kvrouter_index::KvIndex;
use tokio::time::Instant;

use super::load::UnitLoads;
use super::pressure::UnitPressure;
use super::rates::{RateSettings, UnitRates};
use super::sink::{EngineLoadSink, TieredSink};
use super::tiers::LowerTiers;
use crate::config::KvConfig;
use crate::events::runtime::{EventSources, FleetKv, Targets};
use crate::tasks::Tasks;
use crate::workers::{Registry, Worker, WorkerId};

/// The KV side of a running router (see module docs).
pub struct KvRuntime {
    pub index: Arc<KvIndex>,
    /// The host and disk tiers' indexes and credits (`tiers.rs`).
    pub tiers: Arc<LowerTiers>,
    pub loads: Arc<UnitLoads>,
    /// Per-unit prefill / decode rates learned from responses (`rates.rs`).
    pub rates: Arc<UnitRates>,
    /// Per-unit KV use and eviction rates sampled from the index (`pressure.rs`).
    pub pressure: Arc<UnitPressure>,
    /// The event sources feeding `index`, `tiers` and `loads`.
    pub sources: Arc<EventSources>,
}

/// The tables the fleet's changes touch (what the event runtime calls back).
#[derive(Clone)]
struct Tables {
    index: Arc<KvIndex>,
    tiers: Arc<LowerTiers>,
    loads: Arc<UnitLoads>,
    rates: Arc<UnitRates>,
    pressure: Arc<UnitPressure>,
}

impl KvRuntime {
    /// Builds the index and starts following `registry` (call inside a tokio runtime, before
    /// workers are registered; already registered ones are picked up too).
    pub fn start(
        tasks: &Tasks,
        page_size: u32,
        config: &KvConfig,
        registry: &Registry,
    ) -> Arc<KvRuntime> {
        let tables = Tables {
            index: Arc::new(KvIndex::new(page_size)),
            tiers: LowerTiers::new(page_size, config.tier_credit),
            loads: Arc::new(UnitLoads::default()),
            rates: Arc::new(UnitRates::new(RateSettings {
                enabled: config.learn_rates,
                tolerance: config.rate_tolerance,
                ..RateSettings::default()
            })),
            pressure: Arc::new(UnitPressure::default()),
        };
        let targets = Targets {
            sink: Arc::new(TieredSink {
                gpu: tables.index.clone(),
                tiers: tables.tiers.clone(),
            }),
            loads: Arc::new(EngineLoadSink {
                loads: tables.loads.clone(),
                page: u64::from(page_size.max(1)),
            }),
            fleet: Arc::new(tables.clone()),
        };
        let sources = EventSources::start(tasks, page_size, config, registry, targets);
        let rt = Arc::new(KvRuntime {
            index: tables.index,
            tiers: tables.tiers,
            loads: tables.loads,
            rates: tables.rates,
            pressure: tables.pressure,
            sources,
        });
        tasks.spawn("kv timer", timer(Arc::downgrade(&rt), registry.clone()));
        rt
    }

    /// JetStream consumer mode: why the router is not ready yet, or None
    /// ([`EventSources::rebuilding`]).
    pub fn rebuilding(&self, registry: &Registry) -> Option<String> {
        self.sources.rebuilding(registry)
    }

    /// `w`'s KV cache is empty (restart, flush, refit): clear all its ranks.
    pub fn clear_worker(&self, w: &Worker) {
        clear_worker(&self.index, &self.tiers, w);
    }

    /// Number of (worker, rank) ZMQ sources running.
    pub fn source_count(&self) -> usize {
        self.sources.source_count()
    }

    /// Number of (worker, rank) engine load sources running.
    pub fn load_source_count(&self) -> usize {
        self.sources.load_source_count()
    }
}

fn clear_worker(index: &KvIndex, tiers: &LowerTiers, w: &Worker) {
    index.set_worker_capacity(w.id, w.info.max_total_num_tokens);
    for rank in w.ranks() {
        index.clear_rank(w.id, rank);
        tiers.clear_rank(w.id, rank);
    }
}

impl FleetKv for Tables {
    fn worker_added(&self, w: &Worker) {
        // Cap its index entries at what its KV cache can hold (ZMQ- or NATS-fed alike).
        self.index
            .set_worker_capacity(w.id, w.info.max_total_num_tokens);
    }

    fn worker_removed(&self, worker: WorkerId) {
        self.index.remove_worker(worker);
        self.tiers.remove_worker(worker);
        self.loads.remove_worker(worker);
        self.rates.remove_worker(worker);
        self.pressure.remove_worker(worker);
    }

    fn worker_restarted(&self, w: &Worker) {
        self.loads.forget_reports(w.id);
        clear_worker(&self.index, &self.tiers, w);
    }
}

async fn timer(weak: Weak<KvRuntime>, registry: Registry) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let mut shown = std::collections::HashSet::new();
    loop {
        tick.tick().await;
        let Some(rt) = weak.upgrade() else { break };
        let now = Instant::now();
        rt.index.expire_predictions(now.into_std());
        rt.index.update_gauges();
        super::metrics::set_tier_blocks(&rt.index, &rt.tiers);
        super::metrics::set_prediction_gauges(&rt.index, &registry, &mut shown);
        rt.rates.refresh();
        rt.pressure.refresh(&rt.index, now);
    }
}
