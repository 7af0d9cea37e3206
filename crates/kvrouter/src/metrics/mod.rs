//! One Prometheus registry for the whole process, and typed metric handles.
//!
//! Every concern defines its own handles (counters, gauges, histograms named
//! `kvrouter_*`) in its own folder and registers them here with [`registry`], so
//! `/metrics` renders everything from one place. `compat/` adds the sgl-router / SMG
//! series of `--metrics-compat`; `request_end` records a finished request (its debug line, its tokens).

pub(crate) mod bounds;
pub(crate) mod compat;
pub(crate) mod limits;
pub(crate) mod request_end;
pub(crate) mod subjects;

use std::sync::OnceLock;

use prometheus::{Encoder, Registry, TextEncoder};

/// The process-wide registry every `kvrouter_*` metric is registered in.
pub(crate) fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::new)
}

/// Registers a collector, ignoring a duplicate registration (handles are created
/// once per process; tests may create several routers in one process).
pub(crate) fn register<C: prometheus::core::Collector + Clone + 'static>(collector: C) -> C {
    // AlreadyReg is the only error a well-formed metric can produce here.
    let _ = registry().register(Box::new(collector.clone()));
    collector
}

/// The families of [`registry`] and of the index crate's own registry
/// ([`kvrouter_index::metrics_registry`]: `kvrouter_index_*`), sorted by name as one
/// registry's `gather` sorts them.
fn gather() -> Vec<prometheus::proto::MetricFamily> {
    let mut families = registry().gather();
    families.extend(kvrouter_index::metrics_registry().gather());
    families.sort_by(|a, b| a.name().cmp(b.name()));
    families
}

/// Renders the registry (and the index's) in the Prometheus text exposition format,
/// followed by the `--metrics-compat` series when enabled.
pub(crate) fn render() -> String {
    let mut buf = Vec::new();
    let encoder = TextEncoder::new();
    let families = gather();
    if encoder.encode(&families, &mut buf).is_err() {
        return String::new();
    }
    let mut text = String::from_utf8(buf).unwrap_or_default();
    text.push_str(&compat::render(&families));
    text
}

#[cfg(test)]
mod tests {
    use kvrouter_index::{KvEvent, KvIndex};

    use crate::workers::WorkerId;

    /// The index crate keeps its series in its own registry: `/metrics` renders them with
    /// the router's, one family list sorted by name as before the index was its own crate.
    #[test]
    fn render_includes_the_index_series_in_name_order() {
        let idx = KvIndex::new(4);
        let event = KvEvent::Stored {
            parent: None,
            block_hashes: vec![1, 2],
            token_ids: (0..8).collect(),
            block_size: 4,
        };
        idx.apply(WorkerId(1), 0, &event).expect("stored");
        idx.update_gauges();
        let text = super::render();
        for name in [
            "kvrouter_index_blocks",
            "kvrouter_index_bytes",
            "kvrouter_index_unknown_parent_total",
        ] {
            assert!(text.contains(&format!("# TYPE {name} ")), "{name} missing");
        }
        let names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .filter(|n| n.starts_with("kvrouter_"))
            .collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted, "families out of name order");
    }
}
