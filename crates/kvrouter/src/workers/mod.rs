//! The worker fleet: registration probes, health checks, load counters, weight
//! versions and the refit gate.
//!
//! - [`Registry`] holds the workers (snapshot reads, draining removal, events);
//! - [`Worker`] is one worker's live state; [`WorkerInfo`] what it reported;
//! - `probe` registers, `health` checks periodically, `views` renders JSON.
//!
//! Dependencies inside this module run one way (a module uses only those listed
//! before it):
//!
//! 0. the identifiers [`WorkerId`] and [`Rank`], the index crate's (`kvrouter_index`);
//! 1. leaves: `role` (PD worker type), `spec`, `kv_block` (the `/server_info` `kv_events` block), `info`, `url` (worker URL validation and normalisation),
//!    `load` (the `/get_load` parser), `http`, `metrics`, `health_state` (the
//!    per-worker verdict and [`HealthConfig`]), `breaker` (the per-worker circuit
//!    breaker and [`BreakerConfig`]), `gates` (the generation of the fleet's routing gates);
//! 2. `job` (ids, spec) and `probe` (http, info);
//! 3. `worker` (ids, info, spec, url, health_state): the worker type;
//! 4. `views` (worker, job): JSON renderings, including [`Worker::to_json`]; `routable`
//!    (worker, gates): the routable workers, rebuilt only after a gate changed;
//! 5. `health` (worker, http, load, metrics, health_state): the checker task, which
//!    sees the fleet only through its `CheckedFleet` trait;
//! 6. `registry` (everything above): owns the workers and jobs, implements
//!    `CheckedFleet` and starts the checker.

pub(crate) mod breaker;
mod gates;
pub(crate) mod health;
mod health_state;
pub(crate) mod http;
pub(crate) mod info;
mod job;
pub(crate) mod kv_block;
pub(crate) mod load;
mod metrics;
pub(crate) mod probe;
pub(crate) mod registry;
pub(crate) mod role;
mod routable;
pub(crate) mod spec;
pub(crate) mod url;
pub(crate) mod views;
pub(crate) mod worker;

pub use breaker::{BreakerConfig, CircuitState};
pub use health_state::HealthSettings;
pub use health_state::{HealthConfig, HealthTransition};
pub use info::{KvEventsConfig, WorkerInfo};
pub use kv_block::KvEventsBlock;
/// The identifiers are the index crate's (it keys blocks by them); re-exported here, where
/// the router's code names them.
pub use kvrouter_index::{Rank, WorkerId};
pub use load::parse_load;
pub use probe::{AddWorkerError, PageSizeRule};
pub use registry::{AddAccepted, Registry, RegistryConfig, RegistryEvent};
pub use role::Role;
pub use spec::{WorkerConfigRequest, WorkerSpec};
pub use worker::{Snapshot, Worker};
