//! KV-aware routing through real `router` processes, one test binary: routing by prefix overlap
//! and predict-on-route (`routing`), DP ranks (`dp`), worker page sizes other than the router's
//! (`page_size`), text routing with a real tokenizer (`text_routing`), namespaced blocks
//! (`namespaces`), HiCache tiers (`tiers`), the per-worker index cap (`index_cap`), replicas
//! converging over NATS (`nats`) and blind placements agreeing without it (`blind_replicas`).
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

#[path = "../support/mod.rs"]
mod support;

mod blind_replicas;
mod dp;
mod index_cap;
mod namespaces;
mod nats;
mod page_size;
mod routing;
mod text_routing;
mod tiers;
