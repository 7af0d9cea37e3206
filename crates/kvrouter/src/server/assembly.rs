//! What a routing mode contributes to the server, built from the configuration: the policy,
//! an optional read-only view of its index (`/debug/index`), and an optional listener that
//! the refit plane tells about cleared caches. The server holds these as trait objects, so it
//! never names a policy's own types. Wired here, above `routing`, `sharing` and `refit`, so
//! none of them imports another to be assembled.

use std::sync::Arc;

use serde_json::Value;

use crate::config::{Config, Mode};
use crate::refit::{CacheCleared, CacheInvalidation};
use crate::routing::kv::{KvPolicy, KvPolicySettings, KvRuntime};
use crate::routing::{policy_for, Policy};
use crate::tasks::Tasks;
use crate::workers::Registry;

/// A routing index that can describe itself for `/debug/index`.
pub trait IndexView: Send + Sync {
    /// The index as JSON, one row per registered worker and rank.
    fn index_json(&self, registry: &Registry) -> Value;

    /// Why `/readiness` must wait for the index (e.g. rebuilding it from a durable event
    /// stream), or None.
    fn not_ready(&self, _registry: &Registry) -> Option<String> {
        None
    }
}

/// The parts a mode adds to the server.
pub(crate) struct RoutingParts {
    pub policy: Box<dyn Policy>,
    pub index: Option<Arc<dyn IndexView>>,
    pub invalidation: Option<Arc<dyn CacheInvalidation>>,
}

/// Builds the parts for `config.mode` (must run inside a tokio runtime). `--mode kv` builds
/// the KV index, follows the fleet's KV event streams, routes with [`KvPolicy`] and clears a
/// worker's blocks when the refit plane reports its cache cleared; with `--nats-url` and
/// `--share-predictions` it shares its bookings with the other replicas (`crate::sharing`).
pub(crate) fn build(config: &Config, registry: &Registry, tasks: &Tasks) -> RoutingParts {
    if config.mode != Mode::Kv {
        return RoutingParts {
            policy: policy_for(config.mode),
            index: None,
            invalidation: None,
        };
    }
    let kv = KvRuntime::start(tasks, config.page_size, &config.kv, registry);
    let mut policy = KvPolicy::new(
        kv.index.clone(),
        kv.loads.clone(),
        KvPolicySettings::from_config(&config.kv),
    )
    .with_rates(kv.rates.clone())
    .with_pressure(kv.pressure.clone())
    .with_tiers(kv.tiers.clone());
    if let (true, Some(url)) = (config.kv.share_predictions, &config.kv.feed.nats_url) {
        policy = policy.with_booking_hook(crate::sharing::start(
            tasks,
            url,
            &config.kv.feed.nats_auth,
            kv.index.clone(),
            registry,
        ));
    }
    RoutingParts {
        policy: Box::new(policy),
        index: Some(kv.clone()),
        invalidation: Some(Arc::new(KvInvalidation {
            kv,
            registry: registry.clone(),
        })),
    }
}

impl IndexView for KvRuntime {
    fn index_json(&self, registry: &Registry) -> Value {
        crate::routing::kv::debug::index_json(self, registry)
    }

    fn not_ready(&self, registry: &Registry) -> Option<String> {
        self.rebuilding(registry)
    }
}

/// Clears a worker's blocks from the KV index when the refit plane reports its cache cleared
/// (flush, weight update, memory release), before the refit call answers.
struct KvInvalidation {
    kv: Arc<KvRuntime>,
    registry: Registry,
}

impl CacheInvalidation for KvInvalidation {
    fn cache_cleared(&self, event: &CacheCleared) {
        if let Some(w) = self.registry.get(event.worker) {
            self.kv.clear_worker(&w);
        }
    }
}
