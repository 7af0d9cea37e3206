//! The RL control plane: refit through the router.
//!
//! A trainer drives pause -> flush -> weight update -> version -> continue through the
//! router instead of calling each engine. The router closes its admission gate (requests
//! wait in a bounded FIFO queue, or get 503), drains or forwards the pause, fans each call
//! out concurrently, clears the KV index for every worker whose cache a call emptied, and
//! tracks each worker's weight version.
//!
//! - `gate`: the router-wide admission gate and its hold queue;
//! - `ops`: what each SGLang control path means (and per-worker `rank_offset`s);
//! - `execute`: one control call over a set of workers, with its effects;
//! - `invalidation`: the cache-cleared hook the KV index subscribes to;
//! - `proxy::rids` (re-exported): rid -> worker for `/abort_request {"rid"}`, kept by the relay;
//! - `selector`: label selectors of the SMG-compatible RL routes;
//! - `metrics`: `kvrouter_refit_*` handles;
//! - `state`: the shared refit state, eligibility, `GET /refit/state`.
//!
//! HTTP handlers live in `server::refit_routes` and `server::rl_api`.

pub(crate) mod execute;
pub(crate) mod gate;
pub(crate) mod invalidation;
mod metrics;
pub(crate) mod ops;
pub(crate) mod selector;
pub(crate) mod state;

pub use crate::proxy::rids::{RidGuard, RidTable};
pub use execute::{BadControlCall, Ctx, Execution, FanoutOutcome};
pub use gate::{GateRefusal, RefitGate};
pub use invalidation::{CacheCleared, CacheHub, CacheInvalidation, ClearReason};
pub use ops::{Op, FANOUT_PATHS};
pub use selector::LabelSelector;
pub use state::{RefitConfig, RefitState};
