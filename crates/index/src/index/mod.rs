//! The embedded KV index: which blocks are resident on which (worker, DP rank) (the
//! run-compressed confirmed residency, `residency/`), `find_matches` over a request's
//! sequence hashes, and the predicted / in-flight layer (predict-on-route) with its TTL.
//! Design notes: docs/index.md.

mod booking;
mod calibration;
mod cap;
mod error;
mod event;
mod find;
pub(crate) mod hashers;
mod kv_index;
mod metrics;
mod overlap;
mod pending;
mod residency;
mod unit;

pub use booking::IndexBooking;
pub use calibration::PredictionCalibration;
pub use cap::DEFAULT_UNIT_CAP_BLOCKS;
pub use error::IndexError;
pub use event::{Applied, EngineHash, KvEvent, Placement, Tier};
pub use kv_index::{IndexStats, KvIndex};
pub use metrics::metrics_registry;
pub use overlap::{Overlaps, UnitOverlap};
pub use pending::PredictionId;
pub use unit::{Unit, MAX_RANK, MAX_WORKER_ID};

#[cfg(test)]
mod diff_tests;
#[cfg(test)]
mod model_check;
#[cfg(test)]
mod tests;
