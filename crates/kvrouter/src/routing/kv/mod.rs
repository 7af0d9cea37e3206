//! KV-aware routing: the `KvPolicy` over (worker, DP rank) units as stages (read: `prompt.rs`,
//! `read.rs`, `board.rs`; score: `score.rs`, `cost.rs`; decide: `decide.rs`, `blind.rs`; book:
//! `book.rs`, `attachment.rs`), the state they read (unit loads, rates learned from
//! responses, KV pressure, lower cache tiers), the index's event and load sinks, the KV
//! runtime those live in (`runtime.rs`; the event sources themselves are started and stopped
//! by `events::runtime`) and the `/debug/index` view.
//! Design and defaults: docs/kv-routing.md.

pub mod attachment;
pub mod blind;
mod board;
mod book;
pub mod cost;
pub mod debug;
mod decide;
pub mod hook;
pub mod load;
pub mod metrics;
pub mod policy;
pub mod pressure;
mod prompt;
pub mod rates;
pub mod read;
pub mod runtime;
pub mod scan;
mod score;
pub mod settings;
pub mod siblings;
pub mod sink;
pub mod tiers;
mod trace;
mod unit_map;

pub use attachment::KvAttachment;
pub use blind::BlindSettings;
pub use cost::{CostWeights, UnitInputs};
pub use hook::{BookingHook, BookingMade};
pub use load::UnitLoads;
pub use policy::{KvPolicy, KvPolicySettings};
pub use pressure::UnitPressure;
pub use rates::UnitRates;
pub use runtime::KvRuntime;
pub use settings::{KvConfig, PredictCredit};
pub use tiers::{LowerTiers, TierCredits};

#[cfg(test)]
mod differential;
#[cfg(test)]
mod tests;
