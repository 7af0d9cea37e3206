//! The one support module of the integration tests (`mod support;` in each test file).
//! Each file has one job: processes (`procs`), HTTP calls (`http`), polling with a
//! deadline (`wait`), the router's admin view (`admin`), a router with captured stderr (`captured`), an in-process stub worker
//! (`stub`), SGLang's event wire format decoded and built independently of `src/`
//! (`sglang_wire`), ZMQ subscriber/replay clients (`zmq`), a fake SGLang publisher
//! (`fake_publisher`), a fake SGLang 0.5.23 HTTP worker (`fake_worker`), fake PD prefill/decode workers (`pd_fake`), a real `nats-server` (`nats`), a real `etcd` and the `router register`
//! sidecar (`etcd`), SGLang HTTP rules (`sglang_rules`),
//! and area helpers for KV routing (`kv`), refit (`refit`) and loadgen (`loadgen`).
//! Each test binary uses a subset, hence `dead_code` (and unused re-exports) are allowed here.
#![allow(dead_code, unused_imports)]
#![allow(clippy::disallowed_methods)] // fixtures spawn their own tasks; `Tasks` is the router's

pub mod admin;
pub mod captured;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod fake_publisher;
pub mod fake_worker;
pub mod http;
pub mod kv;
pub mod loadgen;
pub mod nats;
pub mod pd_fake;
pub mod procs;
pub mod refit;
pub mod sglang_rules;
pub mod sglang_wire;
pub mod stub;
pub mod wait;
pub mod zmq;

/// The entry points most tests need (the original `support` API).
pub use procs::{free_port, mock, router, Proc};
