//! The cache-invalidation hook: how the KV side learns that a worker's KV cache is gone
//! (successful flush, weight update with `flush_cache`, release of `kv_cache`), without
//! waiting for the worker's own `AllBlocksCleared` event.
//!
//! Two ways to listen, both fed by [`CacheHub::cleared`]:
//! - [`CacheInvalidation`] listeners are called synchronously, before the refit call that
//!   cleared the cache answers (the KV index uses this: it is empty when the call returns);
//! - [`CacheHub::subscribe`] is a broadcast of [`CacheCleared`] for asynchronous observers.

use std::sync::Arc;

use parking_lot::RwLock;
use tokio::sync::broadcast;

use crate::workers::WorkerId;

/// Why a worker's cache was cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClearReason {
    /// `/flush_cache` succeeded.
    Flush,
    /// A weight update with `flush_cache` (default true) succeeded.
    WeightUpdate,
    /// `/release_memory_occupation` released `kv_cache`.
    MemoryRelease,
}

impl ClearReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ClearReason::Flush => "flush",
            ClearReason::WeightUpdate => "weight_update",
            ClearReason::MemoryRelease => "memory_release",
        }
    }
}

/// One worker's KV cache became empty (all DP ranks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheCleared {
    pub worker: WorkerId,
    pub url: String,
    pub reason: ClearReason,
}

/// Called synchronously for every [`CacheCleared`]; must not block (clear and return).
pub trait CacheInvalidation: Send + Sync {
    fn cache_cleared(&self, event: &CacheCleared);
}

/// The hook (see module docs). One per router process, in `AppState::refit`.
pub struct CacheHub {
    listeners: RwLock<Vec<Arc<dyn CacheInvalidation>>>,
    tx: broadcast::Sender<CacheCleared>,
}

impl Default for CacheHub {
    fn default() -> Self {
        CacheHub {
            listeners: RwLock::new(Vec::new()),
            tx: broadcast::channel(1024).0,
        }
    }
}

impl CacheHub {
    /// Adds a synchronous listener (e.g. the KV index: clear the worker, drop its predictions).
    pub fn add_listener(&self, listener: Arc<dyn CacheInvalidation>) {
        self.listeners.write().push(listener);
    }

    /// Asynchronous stream of clears (may lag under a flood; listeners never do).
    pub fn subscribe(&self) -> broadcast::Receiver<CacheCleared> {
        self.tx.subscribe()
    }

    /// Announces that `worker`'s cache is empty: listeners first, then the broadcast.
    pub fn cleared(&self, worker: WorkerId, url: &str, reason: ClearReason) {
        let event = CacheCleared {
            worker,
            url: url.to_string(),
            reason,
        };
        for l in self.listeners.read().iter() {
            l.cache_cleared(&event);
        }
        super::metrics::RefitMetrics::get()
            .cache_clears
            .with_label_values(&[reason.as_str()])
            .inc();
        tracing::debug!(worker = %url, reason = reason.as_str(), "KV cache cleared: index invalidated");
        let _ = self.tx.send(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    #[derive(Default)]
    struct Seen(Mutex<Vec<WorkerId>>);
    impl CacheInvalidation for Seen {
        fn cache_cleared(&self, e: &CacheCleared) {
            self.0.lock().push(e.worker);
        }
    }

    #[test]
    fn listeners_and_subscribers_both_hear() {
        let hub = CacheHub::default();
        let seen = Arc::new(Seen::default());
        hub.add_listener(seen.clone());
        let mut rx = hub.subscribe();
        hub.cleared(WorkerId(3), "http://a", ClearReason::Flush);
        assert_eq!(*seen.0.lock(), vec![WorkerId(3)]);
        let e = rx.try_recv().expect("broadcast");
        assert_eq!((e.worker, e.reason), (WorkerId(3), ClearReason::Flush));
    }
}
