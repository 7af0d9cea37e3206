//! The `model` label of the compat series: the model the fleet serves (the first registered
//! worker's `served_model_name` / model path from `/server_info` or `/v1/models`, as SMG labels
//! by the worker's model id), else `unknown` (SMG's `UNKNOWN_MODEL_ID`, what it reports before
//! any worker is known).

use std::sync::Arc;

use parking_lot::RwLock;

use crate::metrics::subjects::SeriesWorker;

/// SMG's label value when no model is known.
pub(crate) const UNKNOWN: &str = "unknown";

/// The fleet's model name, once a worker reported one.
static FLEET: RwLock<Option<Arc<str>>> = RwLock::new(None);

/// The model name to report (see module docs).
pub(crate) fn current() -> Arc<str> {
    FLEET.read().clone().unwrap_or_else(|| Arc::from(UNKNOWN))
}

/// Sets the fleet's model name directly (unit tests of the series).
#[cfg(test)]
pub(super) fn set_for_test(name: Option<&str>) {
    *FLEET.write() = name.map(Arc::from);
}

/// Follows the fleet: the first worker (in registration order) that reports a model name.
pub(super) fn set_fleet<W: SeriesWorker>(workers: &[Arc<W>]) {
    let name = workers.iter().find_map(|w| w.model_id()).map(Arc::from);
    let mut fleet = FLEET.write();
    if fleet.as_deref() != name.as_deref() {
        *fleet = name;
    }
}

/// A worker was picked for a request: its model name stands for the fleet's until the
/// registry watch ([`follow`]) has caught up, so no request is labelled `unknown` by a race.
pub(super) fn seen(worker: &impl SeriesWorker) {
    if FLEET.read().is_some() {
        return;
    }
    if let Some(name) = worker.model_id() {
        FLEET.write().get_or_insert_with(|| Arc::from(name));
    }
}

/// Keeps the fleet's model name current while the registry lives (a task on its snapshot
/// watch `rx`).
pub(crate) fn follow<W: SeriesWorker + Send + Sync + 'static>(
    tasks: &crate::tasks::Tasks,
    mut rx: tokio::sync::watch::Receiver<Arc<Vec<Arc<W>>>>,
) {
    tasks.spawn("compat model name", async move {
        loop {
            set_fleet(&rx.borrow_and_update());
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
}
