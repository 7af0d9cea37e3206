//! `AppState`: everything a request handler needs, built once at start and shared.

use std::sync::Arc;
use std::time::Instant;

use crate::config::{Config, Mode};
use crate::proxy::{build_client, Backoff, UpstreamClient};
use crate::routing::kv::{KvPolicy, KvPolicySettings, KvRuntime};
use crate::routing::{policy_for, Policy, Selector, StickyTable};
use crate::workers::{HealthConfig, Registry, RegistryConfig};

/// Shared per-process router state.
pub struct AppState {
    pub config: Config,
    pub registry: Registry,
    pub selector: Selector,
    pub client: UpstreamClient,
    pub backoff: Backoff,
    pub started: Instant,
    /// KV mode: the index, unit loads and event sources (None in other modes).
    pub kv: Option<Arc<KvRuntime>>,
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
            ..HealthConfig::default()
        },
        probe_timeout: config.health_check_timeout,
        ..RegistryConfig::default()
    }
}

impl AppState {
    /// Builds the state with the policy for `config.mode` (must run inside a tokio runtime).
    /// `--mode kv` builds the KV index, follows the fleet's KV event streams and routes with
    /// [`KvPolicy`].
    pub fn new(config: Config) -> Arc<AppState> {
        let registry = Registry::new(registry_config(&config));
        if config.mode == Mode::Kv {
            let kv = KvRuntime::start(config.page_size, &config.kv, &registry);
            let policy = KvPolicy::new(
                kv.index.clone(),
                kv.loads.clone(),
                KvPolicySettings::from_config(&config.kv),
            );
            return AppState::build(config, Box::new(policy), registry, Some(kv));
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
            backoff: Backoff {
                initial: config.retry_initial_backoff,
                max: config.retry_max_backoff,
            },
            registry,
            selector,
            started: Instant::now(),
            config,
            kv,
        })
    }
}
