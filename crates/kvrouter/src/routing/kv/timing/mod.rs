//! Time in the KV cost model: a robust online least-squares fit (`rls.rs`) and the per-unit
//! prefill / decode rates learned from observed response timings (`rates.rs`).

mod rates;
mod rls;

pub use rates::{Observation, Rates, TimingModel};
