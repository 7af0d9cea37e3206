//! The simulated SGLang worker behind `sglang-mock`.
