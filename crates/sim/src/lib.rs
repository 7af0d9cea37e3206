//! The simulated SGLang fleet: `mock` is the engine and HTTP/ZMQ surface behind the
//! `sglang-mock` binary, `loadgen` the workloads behind the `loadgen` binary, and `demo`
//! the embedded end-to-end run (`loadgen demo`: mocks + router + workloads in one process),
//! `presets` the workload presets of workloads/presets.toml that the demo and the Python
//! harnesses share.

pub mod demo;
pub mod loadgen;
pub mod mock;
pub mod presets;
