//! [`Gates`]: the generation of a fleet's routing gates (health, circuit breaker, drain, pause,
//! refit, compatibility), which a registry and every worker it builds share, so that the
//! routable list (`routable.rs`) is rebuilt only after a change.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The generation of the fleet's routing gates: bumped after any worker's gate changed and
/// after the set of workers changed. Shared by a registry and every worker it builds.
#[derive(Debug, Default, Clone)]
pub(super) struct Gates(Arc<AtomicU64>);

impl Gates {
    /// A gate changed (call after the change is stored).
    pub(super) fn bump(&self) {
        self.0.fetch_add(1, Ordering::Release);
    }

    pub(super) fn generation(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}
