//! [`PdConfig`]: the validated PD settings (`--pd-disaggregation`, `--prefill URL
//! [BOOTSTRAP_PORT|none]`, `--decode URL`, `--prefill-policy`, `--decode-policy`, as
//! sgl-router 0.3.2 and SMG take them; `config::pd` validates them), and the worker
//! registrations they ask for at start.

use crate::routing::Mode;
use crate::workers::{Role, WorkerSpec};

/// `--kv-prefill-weight` of a PD router unless one is given (it is 1 otherwise). Its KV policy
/// places the prefill leg, whose workers do nothing but prefill: a prompt prefilled again on
/// another prefill worker is pure extra work for the pool that every queued request waits
/// behind, where on an aggregated worker decoding dilutes it. At 1 the load terms of 20-57k
/// blocks in flight per prefill worker outweighed a 70-120-block prompt and sent a GRPO
/// group's late siblings to the other worker (47 split decisions of 4,096 on 2P6D); at 4 there
/// were 4, with prefill hit +1.3 to +1.9 points on GRPO 2P6D, makespan and TTFT level or
/// better, agent sessions level (docs/pd.md "Prefill weight").
pub(crate) const PD_PREFILL_WEIGHT: f64 = 4.0;

/// How one leg picks its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegPolicy {
    /// The router's own policy (`--mode` / `--policy`): the KV index in kv mode.
    Router,
    /// A basic policy of its own (round-robin, random, least-load).
    Basic(Mode),
    /// Decode only: the KV index when every decode candidate publishes KV events (decode-side
    /// radix cache), else least-load.
    Auto,
}

/// One `--prefill` worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefillUrl {
    /// Canonical URL.
    pub url: String,
    /// Its bootstrap port (`None`: sent as null).
    pub bootstrap_port: Option<u16>,
}

/// Validated PD settings (`Config::pd`; `None` without `--pd-disaggregation`).
#[derive(Debug, Clone, PartialEq)]
pub struct PdConfig {
    pub prefill: Vec<PrefillUrl>,
    pub decode: Vec<String>,
    pub prefill_policy: LegPolicy,
    pub decode_policy: LegPolicy,
}

impl PdConfig {
    /// The registrations `--prefill` / `--decode` ask for, in the order given.
    pub fn startup_workers(&self) -> Vec<(String, WorkerSpec)> {
        let spec = |role: Role, bootstrap_port| WorkerSpec {
            worker_type: Some(role.as_str().to_string()),
            bootstrap_port,
            ..WorkerSpec::default()
        };
        self.prefill
            .iter()
            .map(|p| (p.url.clone(), spec(Role::Prefill, p.bootstrap_port)))
            .chain(
                self.decode
                    .iter()
                    .map(|d| (d.clone(), spec(Role::Decode, None))),
            )
            .collect()
    }
}
