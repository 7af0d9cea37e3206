//! PD disaggregation through the router (docs/pd.md), one test binary: over PD fakes
//! (`fleet`) and over real `sglang-mock` prefill / decode roles (`mock`).
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

#[path = "../support/mod.rs"]
mod support;

mod fleet;
mod mock;
