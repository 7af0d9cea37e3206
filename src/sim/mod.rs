//! The simulated SGLang fleet: `mock` is the engine and HTTP/ZMQ surface behind the
//! `sglang-mock` binary, `loadgen` the workloads behind the `loadgen` binary.

pub mod loadgen;
pub mod mock;
