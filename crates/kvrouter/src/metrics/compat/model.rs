//! The `model` label of the compat series: the model name the router was given (`--model`,
//! through [`set_configured`]), else the one the fleet serves (the first registered worker's
//! `served_model_name` / model path from `/server_info` or `/v1/models`), else `unknown`
//! (SMG's `UNKNOWN_MODEL_ID`, what it reports before any worker is known).

use std::sync::Arc;

use parking_lot::RwLock;

use crate::workers::Worker;

/// SMG's label value when no model is known.
pub const UNKNOWN: &str = "unknown";

#[derive(Default)]
struct Names {
    configured: Option<Arc<str>>,
    fleet: Option<Arc<str>>,
}

static NAMES: RwLock<Names> = RwLock::new(Names {
    configured: None,
    fleet: None,
});

/// The model name to report (see module docs).
pub fn current() -> Arc<str> {
    let n = NAMES.read();
    n.configured
        .clone()
        .or_else(|| n.fleet.clone())
        .unwrap_or_else(|| Arc::from(UNKNOWN))
}

/// The router's own model name (`--model`); `None` or empty = follow the fleet.
pub fn set_configured(name: Option<&str>) {
    NAMES.write().configured = name.filter(|n| !n.is_empty()).map(Arc::from);
}

/// Follows the fleet: the first worker (in registration order) that reports a model name.
pub(super) fn set_fleet(workers: &[Arc<Worker>]) {
    let name = workers.iter().find_map(|w| w.model_id()).map(Arc::from);
    let mut n = NAMES.write();
    if n.fleet.as_deref() != name.as_deref() {
        n.fleet = name;
    }
}

/// A worker was picked for a request: its model name stands for the fleet's until the
/// registry watch ([`follow`]) has caught up, so no request is labelled `unknown` by a race.
pub(super) fn seen(worker: &Worker) {
    if NAMES.read().fleet.is_some() {
        return;
    }
    if let Some(name) = worker.model_id() {
        NAMES.write().fleet.get_or_insert_with(|| Arc::from(name));
    }
}

/// Keeps the fleet's model name current while `registry` lives (a task on its snapshot watch).
pub fn follow(registry: &crate::workers::Registry) {
    let mut rx = registry.watch();
    tokio::spawn(async move {
        loop {
            set_fleet(&rx.borrow_and_update());
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
}
