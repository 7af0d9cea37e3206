//! Workers joining, living in and leaving the fleet, one test binary: registration and its
//! probe (`registration`), health and draining (`lifecycle`), the admin API of the three
//! generations and its lock (`admin`, `admin_lock`), worker URL safety and spellings
//! (`url_safety`, `url_spellings`), credentials on every call to a worker (`credentials`),
//! discovery from `/server_info`'s `kv_events` block (`kv_events_block`), and, with the `etcd`
//! feature, etcd discovery: leases, the `router register` sidecar and the watch
//! (`discovery_lease`, `discovery_register`, `discovery_watch`).
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

#[path = "../support/mod.rs"]
mod support;

mod admin;
mod admin_lock;
mod credentials;
// etcd discovery is behind the `etcd` feature (needs protoc).
#[cfg(feature = "etcd")]
mod discovery_lease;
#[cfg(feature = "etcd")]
mod discovery_register;
#[cfg(feature = "etcd")]
mod discovery_watch;
mod kv_events_block;
mod lifecycle;
mod registration;
mod url_safety;
mod url_spellings;
