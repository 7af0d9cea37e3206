//! `sglang-mock` alone, one test binary: its HTTP surface (`http_surface`: SGLang's
//! cached-tokens rule, SSE framing, weight updates, pause / continue, info and error shapes),
//! its KV events against SGLang's wire format (`events`) and against bytes SGLang 0.5.23's own
//! classes produce (`kv_events_fixture`), namespaces and the host tier (`namespaces`), PD
//! roles (`pd`), `/server_info` against SGLang's (`server_info`), and its observability under
//! the non-default models (`observability`).
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

#[path = "../support/mod.rs"]
mod support;

mod events;
mod http_surface;
mod kv_events_fixture;
mod namespaces;
mod observability;
mod pd;
mod server_info;
