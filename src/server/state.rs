//! `AppState`: everything a request handler needs, built once at start and shared.

use std::sync::Arc;
use std::time::Instant;

use crate::config::{Config, Mode};
use crate::proxy::{build_client, Backoff, UpstreamClient};
use crate::refit::{RefitConfig, RefitState};
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
    /// The RL control plane: admission gate, cache-invalidation hook, rid table.
    pub refit: Arc<RefitState>,
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
        hold_version_mismatch: !config.allow_version_mismatch,
        ..RegistryConfig::default()
    }
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
    pub fn new(config: Config) -> Arc<AppState> {
        if config.mode == Mode::Kv {
            tracing::warn!(
                "--mode kv: KV-aware scoring is not available in this build; falling back to least-load"
            );
        }
        let policy = policy_for(config.mode);
        AppState::with_policy(config, policy)
    }

    /// Builds the state with an explicit policy (how a KV-aware policy is plugged in).
    pub fn with_policy(config: Config, policy: Box<dyn Policy>) -> Arc<AppState> {
        let registry = Registry::new(registry_config(&config));
        let selector = Selector::new(policy, StickyTable::new(config.sticky_ttl));
        Arc::new(AppState {
            client: build_client(config.connect_timeout),
            backoff: Backoff {
                initial: config.retry_initial_backoff,
                max: config.retry_max_backoff,
            },
            refit: RefitState::new(refit_config(&config)),
            registry,
            selector,
            started: Instant::now(),
            config,
        })
    }
}
