//! `RefitState`: the refit plane's shared pieces (gate, cache hook, rid table, timeouts),
//! one per router process, held in `AppState::refit`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::gate::RefitGate;
use super::invalidation::CacheHub;
use crate::proxy::rids::RidTable;
use crate::workers::{Registry, Worker};

/// Settings of the refit plane (from the router's config).
#[derive(Debug, Clone)]
pub struct RefitConfig {
    /// Requests held while the gate is closed.
    pub queue_size: usize,
    /// Refuse (503) instead of holding while closed.
    pub refuse_when_paused: bool,
    /// Longest a held request waits for the gate (then 503).
    pub max_hold: Duration,
    /// Deadline of each forwarded control call (weight loads can be slow).
    pub call_timeout: Duration,
    /// Longest a `wait` pause waits for in-flight requests.
    pub drain_timeout: Duration,
}

impl Default for RefitConfig {
    fn default() -> Self {
        RefitConfig {
            queue_size: 4096,
            refuse_when_paused: false,
            max_hold: Duration::from_secs(1800),
            call_timeout: Duration::from_secs(1800),
            drain_timeout: Duration::from_secs(1800),
        }
    }
}

/// See module docs.
pub struct RefitState {
    pub config: RefitConfig,
    pub gate: RefitGate,
    /// The KV-index invalidation hook (see [`super::invalidation`]).
    pub cache: CacheHub,
    pub rids: RidTable,
}

impl RefitState {
    pub fn new(config: RefitConfig) -> Arc<RefitState> {
        Arc::new(RefitState {
            gate: RefitGate::new(config.queue_size, config.refuse_when_paused),
            cache: CacheHub::default(),
            rids: RidTable::default(),
            config,
        })
    }

    /// After booking `worker` (its in-flight count already raised): true when the request may
    /// still go there, false when a pause closed the gate or paused the worker meanwhile (drop
    /// the booking and wait at the gate again). Sequentially consistent with the pause, which
    /// closes first and reads in-flight counts after.
    pub fn still_admitted(&self, worker: &Worker) -> bool {
        !self.gate.is_closed() && !worker.is_paused()
    }
}

/// Workers a fan-out goes to: registered, healthy, not draining or incompatible, in
/// registration order (the stable order rank offsets follow).
pub(crate) fn eligible(registry: &Registry) -> Vec<Arc<Worker>> {
    let mut v: Vec<Arc<Worker>> = registry
        .snapshot()
        .iter()
        .filter(|w| w.is_healthy() && !w.is_draining() && !w.is_incompatible())
        .cloned()
        .collect();
    v.sort_by_key(|w| w.id);
    v
}

/// Clears `awaiting_refit` on held workers whose version now equals the fleet's.
pub(crate) fn relevel(registry: &Registry) {
    let Some(fleet) = registry.fleet_weight_version() else {
        return;
    };
    for w in registry.snapshot().iter().filter(|w| w.is_awaiting_refit()) {
        if w.weight_version().as_deref() == Some(fleet.as_str()) {
            tracing::info!(worker = %w.url, version = %fleet, "worker refit to the fleet's version: routable again");
            w.set_awaiting_refit(false);
        }
    }
}

/// `GET /refit/state`.
pub(crate) fn state_json(refit: &RefitState, registry: &Registry) -> Value {
    let snap = registry.snapshot();
    let serving: Vec<&Arc<Worker>> = snap.iter().filter(|w| !w.is_draining()).collect();
    let first = serving.first().and_then(|w| w.weight_version());
    let agree = !serving.is_empty()
        && first.is_some()
        && serving.iter().all(|w| w.weight_version() == first);
    json!({
        "gate": {
            "closed": refit.gate.is_closed(),
            "mode": refit.gate.mode(),
            "queued": refit.gate.queued(),
        },
        "paused": refit.gate.is_closed(),
        "versions_agree": agree,
        "weight_version": if agree { first } else { None },
        "fleet_weight_version": registry.fleet_weight_version(),
        "in_flight_rids": refit.rids.len(),
        "workers": snap.iter().map(|w| json!({
            "id": w.public_id,
            "worker_key": w.id.to_string(),
            "url": w.url,
            "paused": w.is_paused() || refit.gate.is_closed(),
            "worker_paused": w.is_paused(),
            "in_flight": w.in_flight(),
            "weight_version": w.weight_version(),
            "incarnation": w.incarnation(),
            "healthy": w.is_healthy(),
            "awaiting_refit": w.is_awaiting_refit(),
            "draining": w.is_draining(),
            "routable": w.is_routable(),
        })).collect::<Vec<_>>(),
    })
}
