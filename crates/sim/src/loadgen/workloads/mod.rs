//! The workloads. Each turns its config into `RequestSpec`s (pure,
//! deterministic functions, unit-tested) and drives them through the `Runner`.

pub mod agent;
pub mod grpo;
pub mod open_loop;
pub mod rollout;
pub mod tenants;
pub mod trace;
