//! `loadgen`, one test binary: the binary's contract without a server (`cli`), the library
//! against an in-process stub SGLang server (`runner`), the `rollout` and `tenants` workloads
//! against a real `sglang-mock` (`workloads`), `grpo|agent|trace` against two mocks with their
//! own counters as the reference (`mocks`), and the README's `loadgen demo` (`demo_smoke`).
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

#[path = "../support/mod.rs"]
mod support;

mod cli;
mod demo_smoke;
mod mocks;
mod runner;
mod workloads;
