//! `AppState`: everything a request handler needs, built once at start and shared.

use std::sync::Arc;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::assembly::{self, IndexView};
use crate::config::Config;
use crate::config::Mode;
use crate::proxy::UpstreamClient;
use crate::refit::RefitState;
use crate::routing::{Policy, Selector, StickyTable};
use crate::tasks::Tasks;
use crate::text::TextRouting;
use crate::workers::{PageSizeRule, Registry, RegistryConfig};

/// Shared per-process router state.
pub struct AppState {
    pub config: Config,
    pub registry: Registry,
    pub selector: Selector,
    pub client: UpstreamClient,
    pub started: Instant,
    /// The RL control plane: admission gate, cache-invalidation hook, rid table.
    pub refit: Arc<RefitState>,
    /// The routing index for `/debug/index` (KV mode; None in other modes).
    pub index: Option<Arc<dyn IndexView>>,
    /// The model tokenizer for text requests (KV mode; None in other modes).
    pub text: Option<Arc<TextRouting>>,
    /// The one shutdown token: cancelled on SIGTERM/SIGINT. `/readiness` answers 503, the
    /// accept loop stops and background tasks watching it end (see `server::shutdown`).
    pub shutdown: CancellationToken,
    /// Every background task of the router (stopped once the drain is over, see
    /// `server::shutdown`).
    pub tasks: Tasks,
    /// etcd discovery, once the server is bound (`--etcd-endpoints`; unset otherwise).
    pub discovery: std::sync::OnceLock<Arc<crate::discovery::Discovery>>,
    /// PD disaggregation (`--pd-disaggregation`; None otherwise).
    pub pd: Option<crate::pd::PdRouter>,
    /// The memory budget of request bodies in flight (`--max-inflight-body-bytes`).
    pub body_budget: crate::proxy::body_budget::BodyBudget,
}

/// The fleet registry settings derived from the router configuration.
pub(crate) fn registry_config(config: &Config) -> RegistryConfig {
    RegistryConfig {
        page_size: match config.mode {
            Mode::Kv => PageSizeRule::Folds {
                router: config.page_size,
            },
            _ => PageSizeRule::Any,
        },
        health: config.health.checks(),
        probe_timeout: config.health.timeout,
        idle_timeout: config.upstream.idle_timeout,
        startup_timeout: config.health.startup_timeout,
        hold_version_mismatch: !config.allow_version_mismatch,
        allow_cidrs: config.workers.allow_cidr.clone(),
        credentials: config.workers.credentials.clone(),
        default_api_key: config.server.api_key.clone(),
        breaker: config.retry.breaker,
        ..RegistryConfig::default()
    }
}

impl AppState {
    /// Builds the state with the routing parts for `config.mode` ([`assembly::build`]); the
    /// mode's cache-invalidation listener is registered with the refit plane.
    pub fn new(config: Config) -> Arc<AppState> {
        let tasks = Tasks::new();
        let registry = Registry::new(registry_config(&config), &tasks);
        let parts = assembly::build(&config, &registry, &tasks);
        let state = AppState::build(config, parts.policy, (registry, tasks), parts.index);
        if let Some(listener) = parts.invalidation {
            state.refit.cache.add_listener(listener);
        }
        state
    }

    /// Builds the state with an explicit policy (how a KV-aware policy is plugged in).
    pub fn with_policy(config: Config, policy: Box<dyn Policy>) -> Arc<AppState> {
        let tasks = Tasks::new();
        let registry = Registry::new(registry_config(&config), &tasks);
        AppState::build(config, policy, (registry, tasks), None)
    }

    fn build(
        config: Config,
        policy: Box<dyn Policy>,
        (registry, tasks): (Registry, Tasks),
        index: Option<Arc<dyn IndexView>>,
    ) -> Arc<AppState> {
        let selector = Selector::new(
            policy,
            StickyTable::with_max_keys(config.sticky_ttl, config.bounds.sticky_max_keys),
        );
        let text = (config.mode == Mode::Kv).then(|| {
            Arc::new(TextRouting::new(
                config.text.tokenizer_path.as_deref(),
                config.text.cache_bytes,
            ))
        });
        Arc::new(AppState {
            pd: crate::pd::PdRouter::new(
                config.workers.pd.as_ref(),
                config.mode,
                config.sticky_ttl,
            ),
            body_budget: crate::proxy::body_budget::BodyBudget::new(
                config.bounds.max_inflight_body_bytes,
            ),
            text,
            client: config.upstream.client(),
            refit: RefitState::new(config.refit.clone()),
            registry,
            selector,
            started: Instant::now(),
            config,
            index,
            shutdown: CancellationToken::new(),
            tasks,
            discovery: std::sync::OnceLock::new(),
        })
    }
}
