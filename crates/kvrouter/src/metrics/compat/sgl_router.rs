//! `sgl_router_*`: the series of sgl-router up to 0.2.x (`sgl-router/src/metrics.rs`,
//! `RouterMetrics`), with its names, labels and recording rules: `requests_total{route}` counts
//! successful requests and `request_errors_total{route,error_type="non_retryable_error"}` the
//! others that were not retried away (`routers/http/router.rs::route_typed_request`).

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Registry,
};

use super::declare::Declare;
use super::derive::{raise_to, Fleet};
use super::{route_path, DURATION_BUCKETS};

pub(super) struct Series {
    requests: IntCounterVec,
    errors: IntCounterVec,
    duration: HistogramVec,
    generate_duration: Histogram,
    retries: IntCounterVec,
    decisions: IntCounterVec,
    processed: IntCounterVec,
    running: IntGaugeVec,
    health: IntGaugeVec,
    active_workers: IntGauge,
    cache_hits: IntCounter,
    cache_misses: IntCounter,
}

#[allow(clippy::expect_used)] // constant, valid metric declarations
impl Series {
    pub(super) fn new(r: &Registry) -> Series {
        let d = Declare(r);
        let counter = |name: &str, help: &str, labels: &[&str]| d.counter(name, help, labels);
        let gauge = |name: &str, help: &str, labels: &[&str]| d.gauge(name, help, labels);
        Series {
            requests: counter(
                "sgl_router_requests_total",
                "Total number of requests by route and method",
                &["route"],
            ),
            errors: counter(
                "sgl_router_request_errors_total",
                "Total number of request errors by route and error type",
                &["route", "error_type"],
            ),
            duration: d.histogram(
                "sgl_router_request_duration_seconds",
                "Request duration in seconds by route",
                &["route"],
            ),
            generate_duration: d.reg(
                Histogram::with_opts(
                    HistogramOpts::new(
                        "sgl_router_generate_duration_seconds",
                        "Generate request duration",
                    )
                    .buckets(DURATION_BUCKETS.to_vec()),
                )
                .expect("valid metric"),
            ),
            retries: counter(
                "sgl_router_retries_total",
                "Total number of request retries by route",
                &["route"],
            ),
            decisions: counter(
                "sgl_router_policy_decisions_total",
                "Total routing policy decisions by policy and worker",
                &["policy", "worker"],
            ),
            processed: counter(
                "sgl_router_processed_requests_total",
                "Total requests processed by each worker",
                &["worker"],
            ),
            running: gauge(
                "sgl_router_running_requests",
                "Number of running requests per worker",
                &["worker"],
            ),
            health: gauge(
                "sgl_router_worker_health",
                "Worker health status (1=healthy, 0=unhealthy)",
                &["worker"],
            ),
            active_workers: d.reg(
                IntGauge::new(
                    "sgl_router_active_workers",
                    "Number of currently active workers",
                )
                .expect("valid metric"),
            ),
            cache_hits: d.reg(
                IntCounter::new("sgl_router_cache_hits_total", "Total cache hits")
                    .expect("valid metric"),
            ),
            cache_misses: d.reg(
                IntCounter::new("sgl_router_cache_misses_total", "Total cache misses")
                    .expect("valid metric"),
            ),
        }
    }

    pub(super) fn request_done(&self, route: &str, status: u16) {
        let path = route_path(route);
        if (200..300).contains(&status) {
            self.requests.with_label_values(&[path]).inc();
        } else if !matches!(status, 502 | 503) {
            self.errors
                .with_label_values(&[path, "non_retryable_error"])
                .inc();
        }
    }

    pub(super) fn duration(&self, route: &str, secs: f64) {
        self.duration
            .with_label_values(&[route_path(route)])
            .observe(secs);
        self.generate_duration.observe(secs);
    }

    pub(super) fn retry(&self, route: &str) {
        self.retries.with_label_values(&[route_path(route)]).inc();
    }

    pub(super) fn selection(&self, policy: &str, worker: &str) {
        self.decisions.with_label_values(&[policy, worker]).inc();
        self.processed.with_label_values(&[worker]).inc();
    }

    pub(super) fn refresh(&self, fleet: &Fleet) {
        self.active_workers.set(fleet.workers as i64);
        self.running.reset();
        for (w, v) in &fleet.in_flight {
            self.running.with_label_values(&[w]).set(*v as i64);
        }
        self.health.reset();
        for (w, v) in &fleet.healthy {
            self.health.with_label_values(&[w]).set(*v as i64);
        }
        if let Some((hits, misses)) = fleet.cache {
            raise_to(&self.cache_hits, hits);
            raise_to(&self.cache_misses, misses);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_under_sgl_router_names_and_labels() {
        let r = Registry::new();
        let s = Series::new(&r);
        s.request_done("generate", 200);
        s.request_done("chat_completions", 400);
        s.request_done("generate", 503);
        s.duration("generate", 0.2);
        s.retry("generate");
        s.selection("cache_aware", "http://a");
        s.refresh(&Fleet {
            workers: 1.0,
            in_flight: vec![("http://a".into(), 2.0)],
            healthy: vec![("http://a".into(), 1.0)],
            cache: Some((3, 1)),
        });
        let text = crate::metrics::compat::tests_support::encode(&r);
        for line in [
            "sgl_router_requests_total{route=\"/generate\"} 1",
            "sgl_router_request_errors_total{error_type=\"non_retryable_error\",route=\"/v1/chat/completions\"} 1",
            "sgl_router_request_duration_seconds_count{route=\"/generate\"} 1",
            "sgl_router_generate_duration_seconds_count 1",
            "sgl_router_retries_total{route=\"/generate\"} 1",
            "sgl_router_policy_decisions_total{policy=\"cache_aware\",worker=\"http://a\"} 1",
            "sgl_router_processed_requests_total{worker=\"http://a\"} 1",
            "sgl_router_running_requests{worker=\"http://a\"} 2",
            "sgl_router_worker_health{worker=\"http://a\"} 1",
            "sgl_router_active_workers 1",
            "sgl_router_cache_hits_total 3",
            "sgl_router_cache_misses_total 1",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert!(
            !text.contains("non_retryable_error\",route=\"/generate\""),
            "a 503 is retried, not an error"
        );
    }
}
