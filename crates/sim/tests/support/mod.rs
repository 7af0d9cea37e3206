//! The one support module of the simulator's test binaries (`mod support;` in each `main.rs`).
//! Each file has one job: an `sglang-mock` inside the test process and raw HTTP/1 calls to it
//! (`inproc`), `sglang-mock` / `loadgen` child processes (`procs`), HTTP calls on `reqwest`
//! (`http`), blocking raw HTTP/1 calls (`raw`), SGLang's event wire format decoded and built independently of `src/`
//! (`sglang_wire`), ZMQ subscriber/replay clients of a mock (`zmq`), SGLang's HTTP rules
//! (`sglang_rules`), and `loadgen` runs checked against the mocks' counters (`loadgen`).
//!
//! `http`, `sglang_wire`, `zmq` and `loadgen` are also the router crate's test helpers (its
//! `tests/support/mod.rs` includes these files by path): they may use only `super::http`,
//! `super::sglang_wire` and `super::procs::sim_bin`, which both support modules provide.
//! Each test binary uses a subset, hence `dead_code` (and unused re-exports) are allowed here.
#![allow(dead_code, unused_imports)]

pub mod http;
pub mod inproc;
pub mod loadgen;
pub mod procs;
pub mod raw;
pub mod sglang_rules;
pub mod sglang_wire;
pub mod zmq;

/// The child-process entry points (the router crate's `support` API).
pub use procs::{mock, Proc};
