//! Prefill-decode disaggregation (`--pd-disaggregation`), SGLang's contract as sgl-router
//! 0.3.2 and SMG implement it (docs/pd.md):
//!
//! - `config`: the PD settings ([`PdConfig`], validated by `config::pd`) and the startup
//!   registrations;
//! - `roles`: the fleet by role (leg candidates, readiness, the model-info worker);
//! - `pair`: a (prefill, decode) pair per attempt, each leg through a routing `Selector`
//!   restricted to its role (the KV policy for the prefill leg in kv mode);
//! - `splice`: the bootstrap and DP-rank fields inserted into the client's bytes;
//!
//! The data plane that runs both legs lives with the server, which it answers through:
//! `server::pd_dispatch` (both legs at once, cancel on failure, retries with a new pair and
//! room) and `server::pd_merge` (the decode response relayed, the prefill's logprobs merged
//! in, errors mapped).

pub(crate) mod config;
pub(crate) mod pair;
pub(crate) mod roles;
pub(crate) mod splice;

pub(crate) use config::{LegPolicy, PdConfig, PrefillUrl, PD_PREFILL_WEIGHT};

/// The PD mode's per-process state (`AppState::pd`).
pub struct PdRouter {
    pub config: PdConfig,
    pub pairs: pair::PairSelector,
}

impl PdRouter {
    /// The PD state for `pd` (None without `--pd-disaggregation`) in routing `mode`, sticky
    /// keys kept for `sticky_ttl`.
    pub fn new(
        pd: Option<&PdConfig>,
        mode: crate::routing::Mode,
        sticky_ttl: std::time::Duration,
    ) -> Option<PdRouter> {
        let pd = pd?;
        Some(PdRouter {
            pairs: pair::PairSelector::new(pd, mode, sticky_ttl),
            config: pd.clone(),
        })
    }
}
