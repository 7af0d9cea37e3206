//! kvrouter: a KV-cache-aware routing proxy for fleets of SGLang workers.
//!
//! One folder per concern. Two flows run through them, each in one direction:
//!
//! - request: `server` (parse routing inputs) -> `routing` (hash, match, score, book)
//!   -> `proxy` (forward the original bytes, relay the response) -> booking released;
//! - event: `events` (decode ZMQ / NATS, check sequence cursors) -> the index.
//!
//! Top-level modules import one way (docs/architecture.md "Module map"; checked by
//! `house::no_import_loop_between_top_level_modules`): `server` wires everything, `config`
//! builds every concern's settings type, and no domain module imports either of them.
//!
//! The index and block hashing are their own crate, `kvrouter_index` (`crates/index`).
//! `workers` owns the fleet (registration, health, load, versions, refit gate),
//! `refit` the RL control plane (pause/drain, fan-out refits, cache invalidation),
//! `text` the model tokenizer for text requests, `metrics`
//! the Prometheus registry, `config` the validated configuration, `discovery` etcd
//! registration and watch, `pd` prefill-decode disaggregation (two legs per request), `sharing` predictions shared across router replicas over NATS, `tasks` the one tracker every background task is spawned through, `signals` and `log_level` what the server and the `router register` sidecar share; the simulated SGLang fleet (`sglang-mock`) and the workload
//! generator (`loadgen`) live in the `kvrouter-sim` crate.

// `std::time::Instant` and `std::sync::Mutex` are disallowed here (crates/kvrouter/clippy.toml:
// tokio's `Instant`, which paused-time tests move; parking_lot's `Mutex`).
#![warn(clippy::disallowed_types)]
#![warn(unreachable_pub)]

mod backoff;
pub mod config;
pub mod discovery;
pub mod events;
pub mod log_level;
mod metrics;
mod pd;
mod proxy;
pub mod refit;
pub mod routing;
pub mod server;
mod sharing;
mod signals;
pub mod tasks;
pub mod text;
pub mod workers;

/// The house rules checked on the sources (issue 27): no function over 80 lines, no import
/// loop between top-level modules.
#[cfg(test)]
mod house;
