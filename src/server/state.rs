//! `AppState`: everything a request handler needs, built once at start and shared.

use std::sync::Arc;
use std::time::Instant;

use crate::config::{Config, Mode};
use crate::proxy::{build_client, Backoff, UpstreamClient};
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
            registry,
            selector,
            started: Instant::now(),
            config,
        })
    }
}
