//! One Prometheus registry for the whole process, and typed metric handles.
//!
//! Every concern defines its own handles (counters, gauges, histograms named
//! `kvrouter_*`) in its own folder and registers them here with [`registry`], so
//! `/metrics` renders everything from one place. `compat/` adds the sgl-router / SMG
//! series of `--metrics-compat`; `request_end` records a finished request (its debug line, its tokens).

pub mod bounds;
pub mod compat;
pub mod request_end;

use std::sync::OnceLock;

use prometheus::{Encoder, Registry, TextEncoder};

/// The process-wide registry every `kvrouter_*` metric is registered in.
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::new)
}

/// Registers a collector, ignoring a duplicate registration (handles are created
/// once per process; tests may create several routers in one process).
pub fn register<C: prometheus::core::Collector + Clone + 'static>(collector: C) -> C {
    // AlreadyReg is the only error a well-formed metric can produce here.
    let _ = registry().register(Box::new(collector.clone()));
    collector
}

/// Renders the registry in the Prometheus text exposition format, followed by the
/// `--metrics-compat` series when enabled.
pub fn render() -> String {
    let mut buf = Vec::new();
    let encoder = TextEncoder::new();
    let families = registry().gather();
    if encoder.encode(&families, &mut buf).is_err() {
        return String::new();
    }
    let mut text = String::from_utf8(buf).unwrap_or_default();
    text.push_str(&compat::render(&families));
    text
}
