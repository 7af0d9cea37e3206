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
use super::KvConfig;
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
        let sources = EventSources::start(tasks, page_size, &config.feed, registry, targets);
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

#[cfg(test)]
mod tests {
    use kvrouter_index::KvEvent;
    use tokio::time::sleep_until;

    use super::*;
    use crate::workers::RegistryConfig;

    #[tokio::test(start_paused = true)]
    async fn the_timer_expires_predictions_samples_pressure_and_rescales_on_the_runtime_clock() {
        let tasks = Tasks::new();
        let registry = Registry::new(RegistryConfig::default(), &tasks);
        let start = Instant::now();
        let rt = KvRuntime::start(&tasks, 4, &KvConfig::default(), &registry);
        // The timer ticks at start + k x 500 ms; the test looks between ticks. It starts past
        // the index's creation (the index counts time from it on the std clock).
        let at = |secs: f64| sleep_until(start + Duration::from_secs_f64(secs));
        let (w, now) = (WorkerId(1), || Instant::now().into_std());
        at(10.25).await;
        let stored = KvEvent::StoredHashed {
            parent: None,
            block_hashes: (1..101).collect(),
            local_hashes: (1..101).collect(),
        };
        rt.index.apply(w, 0, &stored).unwrap();
        let seqs: Vec<u64> = (1000..1004).collect();
        let mut booking = rt
            .index
            .book_at(w, 0, &seqs, Duration::from_secs(2), now())
            .unwrap();
        booking.prefill_done();
        drop(booking);
        // Its TTL ends at 12.25 s: the tick at 12 s keeps it, the one at 12.5 s expires it.
        let expired = || rt.index.prediction_calibration(w, 0, now()).expired;
        at(12.4).await;
        assert_eq!(expired(), 0);
        at(12.6).await;
        assert_eq!(expired(), 4);
        // Pressure: 50 blocks evicted between the ticks at 12.5 and 13 s (100 per second, for
        // 0.5 s of the 5 s mean), then none until 13.5 s (the mean decays).
        let gone = KvEvent::Removed {
            block_hashes: (51..101).collect(),
        };
        rt.index.apply(w, 0, &gone).unwrap();
        let rate = || rt.pressure.view(w, 0).evictions_per_sec;
        assert_eq!(rate(), 0.0);
        at(13.1).await;
        let first = 100.0 * (1.0 - (-0.1f64).exp());
        assert!((rate() - first).abs() < 1e-9, "{}", rate());
        at(13.6).await;
        assert!(
            (rate() - first * (-0.1f64).exp()).abs() < 1e-9,
            "{}",
            rate()
        );
        // Learned rates: a unit three times slower is scaled at the next tick, not before.
        for (i, secs) in [0.01, 0.01, 0.03].into_iter().enumerate() {
            let unit = rt.rates.unit(WorkerId(10 + i as u32), "http://w", 0);
            for b in 0..16 {
                let blocks = f64::from(10 + b);
                unit.observe_prefill(secs * blocks, blocks);
            }
        }
        assert_eq!(
            rt.rates.speed(WorkerId(12), 0),
            super::super::rates::Speed::UNIT
        );
        at(14.1).await;
        let slow = rt.rates.speed(WorkerId(12), 0).prefill;
        assert!((slow - 3.0).abs() < 1e-9, "{slow}");
    }
}
