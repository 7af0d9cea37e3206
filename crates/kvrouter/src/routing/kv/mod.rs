//! KV-aware routing: the cost model, the `KvPolicy` over (worker, DP rank) units, the
//! placement of blind requests (rendezvous hashing with bounded loads), the per-request
//! attachment (predict-on-route booking, unit load, `meta_info` scan), the unit rates learned
//! from responses, the lower cache tiers (`tiers.rs`), the index's event and load sinks, the
//! KV runtime those live in (`runtime.rs`; the event sources themselves are started and
//! stopped by `events::runtime`) and the `/debug/index` view.
//! Design and defaults: docs/kv-routing.md.

pub mod attachment;
pub mod blind;
pub mod cost;
pub mod debug;
pub mod hook;
pub mod load;
pub mod metrics;
pub mod policy;
pub mod pressure;
pub mod rates;
pub mod runtime;
pub mod scan;
pub mod siblings;
pub mod sink;
pub mod tiers;

pub use attachment::KvAttachment;
pub use blind::BlindSettings;
pub use cost::{CostWeights, UnitInputs};
pub use hook::{BookingHook, BookingMade};
pub use load::UnitLoads;
pub use policy::{KvPolicy, KvPolicySettings};
pub use pressure::UnitPressure;
pub use rates::UnitRates;
pub use runtime::KvRuntime;
pub use tiers::{LowerTiers, TierCredits};

#[cfg(test)]
mod tests;
