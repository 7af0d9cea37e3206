//! KV events into the router, one test binary: SGLang's ZMQ stream into `ZmqSource` in this
//! process (`zmq`: gap -> replay, restarts) and against real `sglang-mock`s (`mock`), the NATS
//! relay and replicas (`nats`, `nats_auth`), JetStream rebuilds (`jetstream`,
//! `jetstream_restart`), Dynamo's events (`dynamo`), a worker restarted behind its URL
//! (`restart`), who may publish into a worker's feed (`trust`), shared predictions between
//! replicas (`shared_predictions`), SGLang's load publisher (`load_publisher`), and both
//! decoders under random bytes (`decoders_random`).
//!
//! The event metrics (`kvrouter::events::metrics::metrics()`) are one per process, and these
//! tests share one: see [`EVENT_METRICS`]. (Routers started as child processes have their own.)
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

#[path = "../support/mod.rs"]
mod support;

mod decoders_random;
mod dynamo;
mod jetstream;
mod jetstream_restart;
mod load_publisher;
mod mock;
mod nats;
mod nats_auth;
mod restart;
mod shared_predictions;
mod trust;
mod zmq;

/// Keeps the process-wide event counters still while a test reads their increase: a test that
/// checks that a counter grew (a replay, a restart) holds it exclusively (`write`), and every
/// test that runs an event source or rank feed in this process holds it shared (`read`).
/// Without it, another test's replay or restart could satisfy the check.
pub static EVENT_METRICS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());
