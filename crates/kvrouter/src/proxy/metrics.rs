//! Data-plane metrics: requests by route/status/worker, router overhead, end-to-end latency,
//! time to first byte of streams, retries, upstream failures and resource limits that tripped.
//! The per-route children the data plane touches on every request are looked up once
//! ([`RouteHandles`]), not with `with_label_values` (hash, lock, clone) per request.

use std::sync::OnceLock;

use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounterVec, Opts};

use crate::metrics::register;
use crate::routing::Endpoint;

/// One data-plane route's children of the per-route histograms.
pub(crate) struct RouteHandles {
    /// `kvrouter_router_overhead_seconds{route}`.
    pub overhead: Histogram,
    /// `kvrouter_request_duration_seconds{route,stream}`, indexed by `stream as usize`.
    pub duration: [Histogram; 2],
}

/// Handles registered once per process.
pub(crate) struct ProxyMetrics {
    /// `kvrouter_requests_total{route,status,worker}`.
    pub requests: IntCounterVec,
    /// `kvrouter_router_overhead_seconds{route}` (tests read it; the data plane uses `routes`).
    #[cfg(test)]
    pub overhead: HistogramVec,
    /// `kvrouter_stream_first_byte_seconds{route}`.
    pub first_byte: HistogramVec,
    /// `kvrouter_retries_total{route,reason}`.
    pub retries: IntCounterVec,
    /// `kvrouter_upstream_failures_total{worker,kind}`.
    pub upstream_failures: IntCounterVec,
    /// Cached children for `generate`, `chat_completions`, `completions` (in that order).
    routes: [RouteHandles; 3],
}

const ENDPOINTS: [Endpoint; 3] = [
    Endpoint::Generate,
    Endpoint::ChatCompletions,
    Endpoint::Completions,
];

const OVERHEAD_BUCKETS: &[f64] = &[
    5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 5e-3, 2e-2, 0.1, 1.0,
];
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    900.0, 3600.0,
];

fn counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric"))
}

fn histogram(name: &str, help: &str, labels: &[&str], buckets: &[f64]) -> HistogramVec {
    register(
        HistogramVec::new(
            HistogramOpts::new(name, help).buckets(buckets.to_vec()),
            labels,
        )
        .expect("valid metric"),
    )
}

impl ProxyMetrics {
    /// Counts one trip of `limit` (a flag name without `--`, e.g. `header_read_timeout`;
    /// `crate::metrics::limits`).
    pub(crate) fn limit_tripped(limit: &str) {
        crate::metrics::limits::limit_tripped(limit);
    }

    /// The cached children of a data-plane route.
    pub(crate) fn route(&self, endpoint: Endpoint) -> &RouteHandles {
        &self.routes[match endpoint {
            Endpoint::Generate => 0,
            Endpoint::ChatCompletions => 1,
            Endpoint::Completions => 2,
        }]
    }

    /// The cached children of the route labelled `route`, if it is a data-plane route.
    #[cfg(test)]
    pub(crate) fn route_by_label(&self, route: &str) -> Option<&RouteHandles> {
        ENDPOINTS
            .iter()
            .position(|e| e.label() == route)
            .map(|i| &self.routes[i])
    }

    pub(crate) fn get() -> &'static ProxyMetrics {
        static M: OnceLock<ProxyMetrics> = OnceLock::new();
        M.get_or_init(ProxyMetrics::register)
    }

    fn register() -> ProxyMetrics {
        let overhead = histogram(
            "kvrouter_router_overhead_seconds",
            "Time from request arrival to the upstream request leaving (read, parse, route, book)",
            &["route"],
            OVERHEAD_BUCKETS,
        );
        let duration = histogram(
            "kvrouter_request_duration_seconds",
            "End-to-end latency: arrival until the response body is fully sent or dropped",
            &["route", "stream"],
            LATENCY_BUCKETS,
        );
        let routes = ENDPOINTS.map(|e| RouteHandles {
            overhead: overhead.with_label_values(&[e.label()]),
            duration: [
                duration.with_label_values(&[e.label(), "false"]),
                duration.with_label_values(&[e.label(), "true"]),
            ],
        });
        ProxyMetrics {
            routes,
            #[cfg(test)]
            overhead,
            requests: counter(
                "kvrouter_requests_total",
                "Requests answered, by route, HTTP status and serving worker (empty = router)",
                &["route", "status", "worker"],
            ),
            first_byte: histogram(
                "kvrouter_stream_first_byte_seconds",
                "Streaming requests: arrival until the first body chunk from the worker",
                &["route"],
                LATENCY_BUCKETS,
            ),
            retries: counter(
                "kvrouter_retries_total",
                "Attempts repeated on another worker after a failure before the first byte",
                &["route", "reason"],
            ),
            upstream_failures: counter(
                "kvrouter_upstream_failures_total",
                "Worker failures seen by the data plane (connect, timeout, 5xx, stream_broken)",
                &["worker", "kind"],
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_route_handles_are_the_labelled_children() {
        let _lock = crate::proxy::telemetry::ROUTE_SERIES.lock();
        let m = ProxyMetrics::get();
        for e in ENDPOINTS {
            let cached = m.route_by_label(e.label()).map(|r| r.overhead.clone());
            let before = m
                .overhead
                .with_label_values(&[e.label()])
                .get_sample_count();
            m.route(e).overhead.observe(0.0);
            let after = m
                .overhead
                .with_label_values(&[e.label()])
                .get_sample_count();
            assert_eq!(after, before + 1, "{}", e.label());
            assert_eq!(cached.map(|h| h.get_sample_count()), Some(after));
        }
        assert!(m.route_by_label("refit").is_none());
    }
}
