//! `smg_*`: the series of SMG 1.13 and sgl-router / sgl-model-gateway 0.3.x
//! (`model_gateway/src/observability/metrics.rs`, `Metrics`), with their labels. kvrouter is
//! an HTTP router over regular SGLang workers, so `router_type`, `connection_mode` = `http`,
//! `backend_type`, `worker_type` = `regular`, and `model` = `unknown` (SMG's `UNKNOWN_MODEL_ID`:
//! kvrouter does not parse the request's model). `endpoint` is `generate`, `chat` or
//! `completions`; `path` the request path. SMG has no cache hit/miss series.

use prometheus::{HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

use super::declare::Declare;
use super::derive::Fleet;
use super::route_path;

const HTTP: &str = "http";
const REGULAR: &str = "regular";
const MODEL: &str = "unknown";

/// SMG's `endpoint` label of a data-plane route.
fn endpoint(route: &str) -> &'static str {
    match route {
        "chat_completions" => "chat",
        "completions" => "completions",
        _ => "generate",
    }
}

/// SMG's `error_type` of a non-2xx answer (`metrics_labels::ERROR_*`).
fn error_type(status: u16, from_worker: bool) -> &'static str {
    match status {
        _ if from_worker => "backend_error",
        503 => "no_workers",
        504 => "timeout",
        400..=499 => "validation_error",
        _ => "internal_error",
    }
}

pub(super) struct Series {
    http_requests: IntCounterVec,
    http_duration: HistogramVec,
    requests: IntCounterVec,
    duration: HistogramVec,
    errors: IntCounterVec,
    ttft: HistogramVec,
    retries: IntCounterVec,
    selections: IntCounterVec,
    requests_active: IntGaugeVec,
    health: IntGaugeVec,
    pool_size: IntGauge,
}

#[allow(clippy::expect_used)] // constant, valid metric declarations
impl Series {
    pub(super) fn new(r: &Registry) -> Series {
        let d = Declare(r);
        let counter = |name: &str, help: &str, labels: &[&str]| d.counter(name, help, labels);
        let gauge = |name: &str, help: &str, labels: &[&str]| d.gauge(name, help, labels);
        let histogram = |name: &str, help: &str, labels: &[&str]| d.histogram(name, help, labels);
        const ROUTER: &[&str] = &[
            "router_type",
            "backend_type",
            "connection_mode",
            "model",
            "endpoint",
        ];
        Series {
            http_requests: counter(
                "smg_http_requests_total",
                "Total HTTP requests by method and path",
                &["method", "path"],
            ),
            http_duration: histogram(
                "smg_http_request_duration_seconds",
                "HTTP request duration by method and path",
                &["method", "path"],
            ),
            requests: counter(
                "smg_router_requests_total",
                "Total routed requests by router_type, backend_type, connection_mode, model, endpoint, streaming",
                &[ROUTER, &["streaming"]].concat(),
            ),
            duration: histogram(
                "smg_router_request_duration_seconds",
                "Router request duration by router_type, backend_type, connection_mode, model, endpoint",
                ROUTER,
            ),
            errors: counter(
                "smg_router_request_errors_total",
                "Router errors by router_type, backend_type, connection_mode, model, endpoint, error_type",
                &[ROUTER, &["error_type"]].concat(),
            ),
            ttft: histogram(
                "smg_router_ttft_seconds",
                "Time to first token by router_type, backend_type, model, endpoint",
                &["router_type", "backend_type", "model", "endpoint"],
            ),
            retries: counter(
                "smg_worker_retries_total",
                "Total retry attempts by worker_type and endpoint",
                &["worker_type", "endpoint"],
            ),
            selections: counter(
                "smg_worker_selection_total",
                "Worker selection events by worker_type, connection_mode, model, policy",
                &["worker_type", "connection_mode", "model", "policy"],
            ),
            requests_active: gauge(
                "smg_worker_requests_active",
                "Currently running requests per worker",
                &["worker"],
            ),
            health: gauge(
                "smg_worker_health",
                "Worker health status (1=healthy, 0=unhealthy)",
                &["worker"],
            ),
            pool_size: d.reg(
                IntGauge::with_opts(
                    Opts::new(
                        "smg_worker_pool_size",
                        "Current worker pool size by worker_type, connection_mode, model",
                    )
                    .const_label("worker_type", REGULAR)
                    .const_label("connection_mode", HTTP)
                    .const_label("model", MODEL),
                )
                .expect("valid metric"),
            ),
        }
    }

    pub(super) fn request_done(&self, route: &str, stream: bool, status: u16, from_worker: bool) {
        let ep = endpoint(route);
        self.http_requests
            .with_label_values(&["POST", route_path(route)])
            .inc();
        let streaming = if stream { "true" } else { "false" };
        self.requests
            .with_label_values(&[HTTP, REGULAR, HTTP, MODEL, ep, streaming])
            .inc();
        if !(200..300).contains(&status) {
            self.errors
                .with_label_values(&[
                    HTTP,
                    REGULAR,
                    HTTP,
                    MODEL,
                    ep,
                    error_type(status, from_worker),
                ])
                .inc();
        }
    }

    pub(super) fn duration(&self, route: &str, secs: f64) {
        self.http_duration
            .with_label_values(&["POST", route_path(route)])
            .observe(secs);
        self.duration
            .with_label_values(&[HTTP, REGULAR, HTTP, MODEL, endpoint(route)])
            .observe(secs);
    }

    pub(super) fn ttft(&self, route: &str, secs: f64) {
        self.ttft
            .with_label_values(&[HTTP, REGULAR, MODEL, endpoint(route)])
            .observe(secs);
    }

    pub(super) fn retry(&self, route: &str) {
        self.retries
            .with_label_values(&[REGULAR, endpoint(route)])
            .inc();
    }

    pub(super) fn selection(&self, policy: &str) {
        self.selections
            .with_label_values(&[REGULAR, HTTP, MODEL, policy])
            .inc();
    }

    pub(super) fn refresh(&self, fleet: &Fleet) {
        self.pool_size.set(fleet.workers as i64);
        self.requests_active.reset();
        for (w, v) in &fleet.in_flight {
            self.requests_active.with_label_values(&[w]).set(*v as i64);
        }
        self.health.reset();
        for (w, v) in &fleet.healthy {
            self.health.with_label_values(&[w]).set(*v as i64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_under_smg_names_and_labels() {
        let r = Registry::new();
        let s = Series::new(&r);
        s.request_done("chat_completions", true, 200, true);
        s.request_done("generate", false, 503, false);
        s.duration("chat_completions", 0.3);
        s.ttft("chat_completions", 0.01);
        s.retry("generate");
        s.selection("round_robin");
        s.refresh(&Fleet {
            workers: 2.0,
            in_flight: vec![("http://a".into(), 1.0)],
            healthy: vec![("http://a".into(), 1.0), ("http://b".into(), 0.0)],
            cache: None,
        });
        let text = crate::metrics::compat::tests_support::encode(&r);
        let base = "backend_type=\"regular\",connection_mode=\"http\"";
        for line in [
            "smg_http_requests_total{method=\"POST\",path=\"/v1/chat/completions\"} 1".to_string(),
            format!("smg_router_requests_total{{{base},endpoint=\"chat\",model=\"unknown\",router_type=\"http\",streaming=\"true\"}} 1"),
            format!("smg_router_request_errors_total{{{base},endpoint=\"generate\",error_type=\"no_workers\",model=\"unknown\",router_type=\"http\"}} 1"),
            format!("smg_router_request_duration_seconds_count{{{base},endpoint=\"chat\",model=\"unknown\",router_type=\"http\"}} 1"),
            "smg_http_request_duration_seconds_count{method=\"POST\",path=\"/v1/chat/completions\"} 1".to_string(),
            "smg_router_ttft_seconds_count{backend_type=\"regular\",endpoint=\"chat\",model=\"unknown\",router_type=\"http\"} 1".to_string(),
            "smg_worker_retries_total{endpoint=\"generate\",worker_type=\"regular\"} 1".to_string(),
            "smg_worker_selection_total{connection_mode=\"http\",model=\"unknown\",policy=\"round_robin\",worker_type=\"regular\"} 1".to_string(),
            "smg_worker_requests_active{worker=\"http://a\"} 1".to_string(),
            "smg_worker_health{worker=\"http://b\"} 0".to_string(),
            "smg_worker_pool_size{connection_mode=\"http\",model=\"unknown\",worker_type=\"regular\"} 2".to_string(),
        ] {
            assert!(text.contains(&line), "{line} in\n{text}");
        }
    }
}
