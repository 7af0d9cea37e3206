//! `sgl_router_*`: the series of sgl-router up to 0.2.x (`sgl-router/src/metrics.rs`,
//! `RouterMetrics`), with its names, labels and recording rules: `requests_total{route}` counts
//! successful requests and `request_errors_total{route,error_type="non_retryable_error"}` the
//! others that were not retried away (`routers/http/router.rs::route_typed_request`).
//! `max_load` / `min_load` mirror the most and least in-flight requests on one worker at the
//! scrape (sgl-router set them from the same per-worker counts at its load-balancing checks).

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Registry,
};

use super::circuit::{self, CircuitCode};
use super::declare::Declare;
use super::derive::{raise_to, Fleet};
use super::{route_path, DURATION_BUCKETS};

pub(super) struct Series {
    route: RouteSeries,
    workers: WorkerSeries,
    cache_hits: IntCounter,
    cache_misses: IntCounter,
    upstream: IntCounterVec,
    retries_exhausted: IntCounterVec,
    backoff: HistogramVec,
    http_requests: IntCounter,
    http_responses: IntCounterVec,
    max_load: IntGauge,
    min_load: IntGauge,
    circuit: circuit::Series,
}

/// Requests, errors, durations and retries by route.
struct RouteSeries {
    requests: IntCounterVec,
    errors: IntCounterVec,
    duration: HistogramVec,
    generate_duration: Histogram,
    retries: IntCounterVec,
}

/// Policy decisions, running requests and health by worker.
struct WorkerSeries {
    decisions: IntCounterVec,
    processed: IntCounterVec,
    running: IntGaugeVec,
    health: IntGaugeVec,
    active_workers: IntGauge,
}

/// sgl-router's circuit-breaker family names.
const CIRCUIT: circuit::Names = circuit::Names {
    state: "sgl_router_cb_state",
    transitions: "sgl_router_cb_state_transitions_total",
    outcomes: "sgl_router_cb_outcomes_total",
    consecutive: None,
};

impl Series {
    /// Declares every family on `r`, in sgl-router's order.
    pub(super) fn new(r: &Registry) -> Series {
        let d = Declare(r);
        Series {
            route: RouteSeries::new(&d),
            workers: WorkerSeries::new(&d),
            cache_hits: d.reg(
                IntCounter::new("sgl_router_cache_hits_total", "Total cache hits")
                    .expect("valid metric"),
            ),
            cache_misses: d.reg(
                IntCounter::new("sgl_router_cache_misses_total", "Total cache misses")
                    .expect("valid metric"),
            ),
            upstream: d.counter(
                "sgl_router_upstream_http_responses_total",
                "Total number of upstream engine HTTP responses by status code",
                &["route", "status_code"],
            ),
            retries_exhausted: d.counter(
                "sgl_router_retries_exhausted_total",
                "Total number of requests that exhausted retries by route",
                &["route"],
            ),
            backoff: d.histogram(
                "sgl_router_retry_backoff_duration_seconds",
                "Backoff duration in seconds by attempt index",
                &["attempt"],
            ),
            http_requests: d.reg(
                IntCounter::new(
                    "sgl_router_http_requests_total",
                    "Total number of HTTP requests",
                )
                .expect("valid metric"),
            ),
            http_responses: d.counter(
                "sgl_router_http_responses_total",
                "Total number of HTTP responses by status code",
                &["status_code"],
            ),
            max_load: d.reg(
                IntGauge::new("sgl_router_max_load", "Maximum worker load").expect("valid metric"),
            ),
            min_load: d.reg(
                IntGauge::new("sgl_router_min_load", "Minimum worker load").expect("valid metric"),
            ),
            circuit: circuit::Series::new(&d, &CIRCUIT),
        }
    }
}

impl RouteSeries {
    fn new(d: &Declare) -> RouteSeries {
        RouteSeries {
            requests: d.counter(
                "sgl_router_requests_total",
                "Total number of requests by route and method",
                &["route"],
            ),
            errors: d.counter(
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
            retries: d.counter(
                "sgl_router_retries_total",
                "Total number of request retries by route",
                &["route"],
            ),
        }
    }
}

impl WorkerSeries {
    fn new(d: &Declare) -> WorkerSeries {
        WorkerSeries {
            decisions: d.counter(
                "sgl_router_policy_decisions_total",
                "Total routing policy decisions by policy and worker",
                &["policy", "worker"],
            ),
            processed: d.counter(
                "sgl_router_processed_requests_total",
                "Total requests processed by each worker",
                &["worker"],
            ),
            running: d.gauge(
                "sgl_router_running_requests",
                "Number of running requests per worker",
                &["worker"],
            ),
            health: d.gauge(
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
        }
    }
}

impl Series {
    pub(super) fn request_done(&self, route: &str, status: u16, from_worker: bool, worker: &str) {
        let path = route_path(route);
        self.http_requests.inc();
        self.http_responses
            .with_label_values(&[status.to_string().as_str()])
            .inc();
        if from_worker && !worker.is_empty() {
            self.circuit.outcome(worker, (200..300).contains(&status));
        }
        if (200..300).contains(&status) {
            self.route.requests.with_label_values(&[path]).inc();
        } else if !matches!(status, 502 | 503) {
            self.route
                .errors
                .with_label_values(&[path, "non_retryable_error"])
                .inc();
        }
    }

    pub(super) fn duration(&self, route: &str, secs: f64) {
        self.route
            .duration
            .with_label_values(&[route_path(route)])
            .observe(secs);
        self.route.generate_duration.observe(secs);
    }

    pub(super) fn retry(&self, route: &str, attempt: u32, secs: f64) {
        self.route
            .retries
            .with_label_values(&[route_path(route)])
            .inc();
        self.backoff
            .with_label_values(&[attempt.to_string().as_str()])
            .observe(secs);
    }

    pub(super) fn retries_exhausted(&self, route: &str) {
        self.retries_exhausted
            .with_label_values(&[route_path(route)])
            .inc();
    }

    pub(super) fn upstream_response(&self, route: &str, status: u16) {
        self.upstream
            .with_label_values(&[route_path(route), status.to_string().as_str()])
            .inc();
    }

    pub(super) fn circuit_state(&self, worker: &str, code: CircuitCode) {
        self.circuit.state(worker, code, 0, 0);
    }

    pub(super) fn circuit_transition(&self, worker: &str, from: CircuitCode, to: CircuitCode) {
        self.circuit.transition(worker, from, to);
    }

    pub(super) fn selection(&self, policy: &str, worker: &str) {
        self.workers
            .decisions
            .with_label_values(&[policy, worker])
            .inc();
        self.workers.processed.with_label_values(&[worker]).inc();
    }

    pub(super) fn refresh(&self, fleet: &Fleet) {
        self.workers.active_workers.set(fleet.workers as i64);
        self.workers.running.reset();
        for (w, v) in &fleet.in_flight {
            self.workers.running.with_label_values(&[w]).set(*v as i64);
        }
        self.workers.health.reset();
        for (w, v) in &fleet.healthy {
            self.workers.health.with_label_values(&[w]).set(*v as i64);
        }
        if let Some((hits, misses)) = fleet.cache {
            raise_to(&self.cache_hits, hits);
            raise_to(&self.cache_misses, misses);
        }
        let loads = fleet.in_flight.iter().map(|(_, v)| *v as i64);
        self.max_load.set(loads.clone().max().unwrap_or(0));
        self.min_load.set(loads.min().unwrap_or(0));
        self.circuit.refresh(&fleet.worker_urls());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_under_sgl_router_names_and_labels() {
        let r = Registry::new();
        let s = Series::new(&r);
        s.request_done("generate", 200, true, "http://a");
        s.request_done("chat_completions", 400, true, "http://a");
        s.request_done("generate", 503, false, "");
        s.duration("generate", 0.2);
        s.retry("generate", 1, 0.1);
        s.retries_exhausted("generate");
        s.upstream_response("generate", 503);
        s.selection("cache_aware", "http://a");
        s.refresh(&Fleet {
            workers: 1.0,
            in_flight: vec![("http://a".into(), 2.0)],
            healthy: vec![("http://a".into(), 1.0)],
            cache: Some((3, 1)),
            health_checks: (0, 0),
            admission_refused: 0,
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
            "sgl_router_upstream_http_responses_total{route=\"/generate\",status_code=\"503\"} 1",
            "sgl_router_retries_exhausted_total{route=\"/generate\"} 1",
            "sgl_router_retry_backoff_duration_seconds_count{attempt=\"1\"} 1",
            "sgl_router_http_requests_total 3",
            "sgl_router_http_responses_total{status_code=\"503\"} 1",
            "sgl_router_max_load 2",
            "sgl_router_min_load 2",
            "sgl_router_cb_state{worker=\"http://a\"} 0",
            "sgl_router_cb_outcomes_total{outcome=\"failure\",worker=\"http://a\"} 1",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert!(
            !text.contains("non_retryable_error\",route=\"/generate\""),
            "a 503 is retried, not an error"
        );
    }
}
