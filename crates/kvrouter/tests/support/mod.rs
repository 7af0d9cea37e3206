//! The one support module of the router's test binaries (`mod support;` in each
//! `tests/<area>/main.rs`). Each file has one job: processes (`procs`), HTTP calls (`http`),
//! polling with a deadline (`wait`), the router's admin view (`admin`), a router with captured
//! stderr (`captured`), an in-process stub worker (`stub`), SGLang's event wire format decoded
//! and built independently of `src/` (`sglang_wire`), ZMQ subscriber/replay clients (`zmq`), a
//! fake SGLang publisher (`fake_publisher`), a fake SGLang 0.5.23 HTTP worker (`fake_worker`),
//! fake PD prefill/decode workers (`pd_fake`), a real `nats-server` (`nats`), a real `etcd` and
//! the `router register` sidecar (`etcd`), and area helpers for KV routing (`kv`), refit
//! (`refit`) and loadgen (`loadgen`).
//!
//! `http`, `sglang_wire`, `zmq` and `loadgen` are the simulator crate's test helpers too: they
//! live in `crates/sim/tests/support/` and are included here by path (they use only
//! `super::http`, `super::sglang_wire` and `super::procs::sim_bin`).
//! Each test binary uses a subset, hence `dead_code` (and unused re-exports) are allowed here.
#![allow(dead_code, unused_imports)]
#![allow(clippy::disallowed_methods)] // fixtures spawn their own tasks; `Tasks` is the router's

pub mod admin;
pub mod captured;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod fake_publisher;
pub mod fake_worker;
#[path = "../../../sim/tests/support/http.rs"]
pub mod http;
pub mod kv;
#[path = "../../../sim/tests/support/loadgen.rs"]
pub mod loadgen;
pub mod nats;
pub mod pd_fake;
pub mod procs;
pub mod refit;
#[path = "../../../sim/tests/support/sglang_wire.rs"]
pub mod sglang_wire;
pub mod stub;
pub mod wait;
#[path = "../../../sim/tests/support/zmq.rs"]
pub mod zmq;

/// The entry points most tests need (the original `support` API).
pub use procs::{free_port, mock, router, Proc};
