//! The worker fleet: registration probes, health checks, load counters, weight
//! versions and the refit gate.
//!
//! - [`Registry`] holds the workers (snapshot reads, draining removal, events);
//! - [`Worker`] is one worker's live state; [`WorkerInfo`] what it reported;
//! - `probe` registers, `health` checks periodically, `views` renders JSON.

pub mod health;
pub mod http;
pub mod id;
pub mod info;
mod metrics;
pub mod probe;
pub mod registry;
pub mod spec;
pub mod views;
pub mod worker;

pub use health::{HealthConfig, HealthTransition};
pub use id::{Rank, WorkerId};
pub use info::{KvEventsConfig, WorkerInfo};
pub use probe::AddWorkerError;
pub use registry::{
    normalize_worker_url, AddAccepted, Registry, RegistryConfig, RegistryEvent, Snapshot,
};
pub use spec::{WorkerConfigRequest, WorkerSpec};
pub use worker::Worker;
