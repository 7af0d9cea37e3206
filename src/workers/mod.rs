//! The worker fleet: registration probes, health checks, load counters, weight
//! versions and the refit gate.

pub mod id;

pub use id::{Rank, WorkerId};
