//! `AppState`: everything a request handler needs, built once at start and shared.

use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use crate::backoff::ExponentialBackoff;
use crate::config::{Config, Mode};
use crate::proxy::{build_client, UpstreamClient};
use crate::refit::{CacheCleared, CacheInvalidation, RefitConfig, RefitState};
use crate::routing::kv::{KvPolicy, KvPolicySettings, KvRuntime};
use crate::routing::{policy_for, Policy, Selector, StickyTable};
use crate::workers::{HealthConfig, Registry, RegistryConfig};

/// Shared per-process router state.
pub struct AppState {
    pub config: Config,
    pub registry: Registry,
    pub selector: Selector,
    pub client: UpstreamClient,
    /// The data-plane retry backoff ([`retry_backoff`]).
    pub backoff: ExponentialBackoff,
    pub started: Instant,
    /// The RL control plane: admission gate, cache-invalidation hook, rid table.
    pub refit: Arc<RefitState>,
    /// KV mode: the index, unit loads and event sources (None in other modes).
    pub kv: Option<Arc<KvRuntime>>,
    /// The one shutdown token: cancelled on SIGTERM/SIGINT. `/readiness` answers 503, the
    /// accept loop stops and background tasks watching it end (see `server::shutdown`).
    pub shutdown: CancellationToken,
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

/// The fleet registry settings derived from the router configuration.
pub fn registry_config(config: &Config) -> RegistryConfig {
    RegistryConfig {
        page_size: config.page_size,
        health: HealthConfig {
            interval: config.health_check_interval,
            timeout: config.health_check_timeout,
            failure_threshold: config.health_failure_threshold,
            success_threshold: config.health_success_threshold,
            endpoint: config.health_check_endpoint.clone(),
            ..HealthConfig::default()
        },
        probe_timeout: config.health_check_timeout,
        startup_timeout: config.worker_startup_timeout,
        hold_version_mismatch: !config.allow_version_mismatch,
        allow_cidrs: config.worker_allow_cidr.clone(),
        credentials: config.worker_credentials.clone(),
        ..RegistryConfig::default()
    }
}

/// The data-plane retry backoff: `retry_initial_backoff` doubling per retry up to
/// `retry_max_backoff`, ±20% jitter. (Config validation keeps initial <= max; otherwise every
/// delay is the max, as the cap always won.)
pub fn retry_backoff(config: &Config) -> ExponentialBackoff {
    let max = config.retry_max_backoff;
    let min = config.retry_initial_backoff.min(max);
    ExponentialBackoff::new(min, max, 0.2)
        .unwrap_or_else(|e| unreachable!("min <= max and a constant jitter: {e}"))
}

/// The refit plane settings derived from the router configuration.
pub fn refit_config(config: &Config) -> RefitConfig {
    RefitConfig {
        queue_size: config.refit_queue_size,
        refuse_when_paused: config.refit_refuse_when_paused,
        max_hold: config.request_timeout,
        call_timeout: config.request_timeout,
        drain_timeout: config.request_timeout,
    }
}

impl AppState {
    /// Builds the state with the policy for `config.mode` (must run inside a tokio runtime).
    /// `--mode kv` builds the KV index, follows the fleet's KV event streams, routes with
    /// [`KvPolicy`] and clears the index when the refit plane reports a cleared cache.
    pub fn new(config: Config) -> Arc<AppState> {
        let registry = Registry::new(registry_config(&config));
        if config.mode == Mode::Kv {
            let kv = KvRuntime::start(config.page_size, &config.kv, &registry);
            let policy = KvPolicy::new(
                kv.index.clone(),
                kv.loads.clone(),
                KvPolicySettings::from_config(&config.kv),
            );
            let state = AppState::build(config, Box::new(policy), registry, Some(kv.clone()));
            state.refit.cache.add_listener(Arc::new(KvInvalidation {
                kv,
                registry: state.registry.clone(),
            }));
            return state;
        }
        let policy = policy_for(config.mode);
        AppState::build(config, policy, registry, None)
    }

    /// Builds the state with an explicit policy (how a KV-aware policy is plugged in).
    pub fn with_policy(config: Config, policy: Box<dyn Policy>) -> Arc<AppState> {
        let registry = Registry::new(registry_config(&config));
        AppState::build(config, policy, registry, None)
    }

    fn build(
        config: Config,
        policy: Box<dyn Policy>,
        registry: Registry,
        kv: Option<Arc<KvRuntime>>,
    ) -> Arc<AppState> {
        let selector = Selector::new(policy, StickyTable::new(config.sticky_ttl));
        Arc::new(AppState {
            client: build_client(config.connect_timeout),
            backoff: retry_backoff(&config),
            refit: RefitState::new(refit_config(&config)),
            registry,
            selector,
            started: Instant::now(),
            config,
            kv,
            shutdown: CancellationToken::new(),
        })
    }
}
