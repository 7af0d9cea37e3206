//! The simulated engine: request/reply types, the step-cost model, the per-rank
//! scheduler (continuous batching over the radix cache) and its async driver.

pub mod rank;
pub mod request;
pub mod scheduler;
pub mod tiers;
pub mod timing;

pub use rank::{Command, LoadView, RankHandle, WeightUpdate};
pub use request::{Done, EngineRequest, FinishReason, Prebuilt, Reply};
pub use scheduler::{Limits, PauseMode, SchedulePolicy, Scheduler, Snapshot};
pub use timing::{Roofline, TimingModel};
