//! `smg_*`: the series of SMG 1.13 and sgl-router / sgl-model-gateway 0.3.x
//! (`model_gateway/src/observability/metrics.rs`, `Metrics`), with their labels. kvrouter is
//! an HTTP router over regular SGLang workers, so `router_type`, `connection_mode` = `http`,
//! `backend_type`, `worker_type` = `regular`; `model` is the served model (`model.rs`).
//! `endpoint` is `generate`, `chat` or `completions`; `path` the request path. SMG has no
//! cache hit/miss series. `error_code` is empty on a worker's own answer (SMG reads it from
//! its `x-smg-error-code` header, which only router-made errors carry).

use std::sync::Arc;

use prometheus::{HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};

use super::circuit::{self, CircuitCode};
use super::declare::Declare;
use super::derive::{raise_to, Fleet};
use super::model;
use super::route_path;

const HTTP: &str = "http";
const REGULAR: &str = "regular";

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
        408 | 504 => "timeout",
        400..=499 => "validation_error",
        _ => "internal_error",
    }
}

/// SMG's `error_type` of a worker's 5xx (`error_type_from_status`).
fn worker_error_type(status: u16) -> &'static str {
    match status {
        408 | 504 => "timeout",
        _ => "backend_error",
    }
}

/// SMG's circuit-breaker family names.
pub(super) const CIRCUIT: circuit::Names = circuit::Names {
    state: "smg_worker_cb_state",
    transitions: "smg_worker_cb_transitions_total",
    outcomes: "smg_worker_cb_outcomes_total",
    consecutive: Some((
        "smg_worker_cb_consecutive_failures",
        "smg_worker_cb_consecutive_successes",
    )),
};

pub(super) struct Series {
    http: HttpSeries,
    router: RouterSeries,
    worker: WorkerSeries,
    circuit: circuit::Series,
    helm: HelmSeries,
}

/// SMG's HTTP layer (`smg_http_*`).
struct HttpSeries {
    requests: IntCounterVec,
    duration: HistogramVec,
    responses: IntCounterVec,
    connections: IntGauge,
    rate_limit: IntCounterVec,
}

/// SMG's router layer (`smg_router_*`).
struct RouterSeries {
    requests: IntCounterVec,
    duration: HistogramVec,
    errors: IntCounterVec,
    upstream: IntCounterVec,
    ttft: HistogramVec,
    tokens: IntCounterVec,
}

/// SMG's worker layer (`smg_worker_*`).
struct WorkerSeries {
    retries: IntCounterVec,
    retries_exhausted: IntCounterVec,
    backoff: HistogramVec,
    selections: IntCounterVec,
    errors: IntCounterVec,
    requests_active: IntGaugeVec,
    health: IntGaugeVec,
    health_checks: IntCounterVec,
    pool_size: IntGaugeVec,
}

/// The SMG Helm chart's dashboard (`deploy/helm/smg/templates/grafana-dashboard.yaml`)
/// queries these names, which SMG itself does not emit.
struct HelmSeries {
    requests: IntCounterVec,
    duration: HistogramVec,
    active_workers: IntGauge,
}

/// The labels of most `smg_router_*` series.
const ROUTER: &[&str] = &[
    "router_type",
    "backend_type",
    "connection_mode",
    "model",
    "endpoint",
];
/// [`ROUTER`] without `connection_mode` (TTFT, tokens).
const SHORT: &[&str] = &["router_type", "backend_type", "model", "endpoint"];

impl Series {
    /// Declares every family on `r`, in SMG's order: HTTP, router, worker, circuit, Helm.
    pub(super) fn new(r: &Registry) -> Series {
        let d = Declare(r);
        Series {
            http: HttpSeries::new(&d),
            router: RouterSeries::new(&d),
            worker: WorkerSeries::new(&d),
            circuit: circuit::Series::new(&d, &CIRCUIT),
            helm: HelmSeries::new(&d),
        }
    }
}

impl HttpSeries {
    fn new(d: &Declare) -> HttpSeries {
        HttpSeries {
            requests: d.counter(
                "smg_http_requests_total",
                "Total HTTP requests by method and path",
                &["method", "path"],
            ),
            duration: d.histogram(
                "smg_http_request_duration_seconds",
                "HTTP request duration by method and path",
                &["method", "path"],
            ),
            responses: d.counter(
                "smg_http_responses_total",
                "HTTP responses by path, status code and error code",
                &["path", "status_code", "error_code"],
            ),
            connections: d.reg(
                IntGauge::new(
                    "smg_http_connections_active",
                    "Data-plane HTTP requests in flight",
                )
                .expect("valid metric"),
            ),
            rate_limit: d.counter(
                "smg_http_rate_limit_total",
                "Requests refused by the concurrency limit (--max-concurrent-requests)",
                &["result"],
            ),
        }
    }
}

impl RouterSeries {
    fn new(d: &Declare) -> RouterSeries {
        RouterSeries {
            requests: d.counter(
                "smg_router_requests_total",
                "Total routed requests by router_type, backend_type, connection_mode, model, endpoint, streaming",
                &[ROUTER, &["streaming"]].concat(),
            ),
            duration: d.histogram(
                "smg_router_request_duration_seconds",
                "Router request duration by router_type, backend_type, connection_mode, model, endpoint",
                ROUTER,
            ),
            errors: d.counter(
                "smg_router_request_errors_total",
                "Router errors by router_type, backend_type, connection_mode, model, endpoint, error_type",
                &[ROUTER, &["error_type"]].concat(),
            ),
            upstream: d.counter(
                "smg_router_upstream_responses_total",
                "Worker responses to each attempt by router_type, status_code, error_code",
                &["router_type", "status_code", "error_code"],
            ),
            ttft: d.histogram(
                "smg_router_ttft_seconds",
                "Time to first token by router_type, backend_type, model, endpoint",
                SHORT,
            ),
            tokens: d.counter(
                "smg_router_tokens_total",
                "Tokens by router_type, backend_type, model, endpoint, token_type (KV mode)",
                &[SHORT, &["token_type"]].concat(),
            ),
        }
    }
}

impl WorkerSeries {
    fn new(d: &Declare) -> WorkerSeries {
        WorkerSeries {
            retries: d.counter(
                "smg_worker_retries_total",
                "Total retry attempts by worker_type and endpoint",
                &["worker_type", "endpoint"],
            ),
            retries_exhausted: d.counter(
                "smg_worker_retries_exhausted_total",
                "Requests whose every allowed attempt asked for a retry",
                &["worker_type", "endpoint"],
            ),
            backoff: d.histogram(
                "smg_worker_retry_backoff_seconds",
                "Backoff before each retry by attempt",
                &["attempt"],
            ),
            selections: d.counter(
                "smg_worker_selection_total",
                "Worker selection events by worker_type, connection_mode, model, policy",
                &["worker_type", "connection_mode", "model", "policy"],
            ),
            errors: d.counter(
                "smg_worker_errors_total",
                "Worker 5xx answers by worker_type, connection_mode, error_type",
                &["worker_type", "connection_mode", "error_type"],
            ),
            requests_active: d.gauge(
                "smg_worker_requests_active",
                "Currently running requests per worker",
                &["worker"],
            ),
            health: d.gauge(
                "smg_worker_health",
                "Worker health status (1=healthy, 0=unhealthy)",
                &["worker"],
            ),
            health_checks: d.counter(
                "smg_worker_health_checks_total",
                "Periodic health checks by worker_type and result",
                &["worker_type", "result"],
            ),
            pool_size: d.gauge(
                "smg_worker_pool_size",
                "Current worker pool size by worker_type, connection_mode, model",
                &["worker_type", "connection_mode", "model"],
            ),
        }
    }
}

impl HelmSeries {
    fn new(d: &Declare) -> HelmSeries {
        HelmSeries {
            requests: d.counter(
                "smg_requests_total",
                "Requests by method and status (the SMG Helm chart dashboard's name)",
                &["method", "status"],
            ),
            duration: d.histogram(
                "smg_request_duration_seconds",
                "Request duration (the SMG Helm chart dashboard's name)",
                &["method"],
            ),
            active_workers: d.reg(
                IntGauge::new(
                    "smg_active_workers",
                    "Healthy workers (the SMG Helm chart dashboard's name)",
                )
                .expect("valid metric"),
            ),
        }
    }
}

impl Series {
    pub(super) fn request_done(
        &self,
        route: &str,
        stream: bool,
        status: u16,
        from_worker: bool,
        worker: &str,
    ) {
        let model: Arc<str> = model::current();
        let model = &*model;
        let ep = endpoint(route);
        let path = route_path(route);
        let code = status.to_string();
        let code = code.as_str();
        self.http.requests.with_label_values(&["POST", path]).inc();
        self.helm.requests.with_label_values(&["POST", code]).inc();
        let error_code = match status {
            200..=299 => "",
            _ if from_worker => "",
            _ => error_type(status, false),
        };
        self.http
            .responses
            .with_label_values(&[path, code, error_code])
            .inc();
        let streaming = if stream { "true" } else { "false" };
        self.router
            .requests
            .with_label_values(&[HTTP, REGULAR, HTTP, model, ep, streaming])
            .inc();
        if !(200..300).contains(&status) {
            self.router
                .errors
                .with_label_values(&[
                    HTTP,
                    REGULAR,
                    HTTP,
                    model,
                    ep,
                    error_type(status, from_worker),
                ])
                .inc();
        }
        if from_worker && !worker.is_empty() {
            self.circuit.outcome(worker, (200..300).contains(&status));
            if status >= 500 {
                self.worker
                    .errors
                    .with_label_values(&[REGULAR, HTTP, worker_error_type(status)])
                    .inc();
            }
        }
    }

    pub(super) fn upstream_response(&self, status: u16) {
        self.router
            .upstream
            .with_label_values(&[HTTP, status.to_string().as_str(), ""])
            .inc();
    }

    pub(super) fn duration(&self, route: &str, secs: f64) {
        let model = model::current();
        let model = &*model;
        self.http
            .duration
            .with_label_values(&["POST", route_path(route)])
            .observe(secs);
        self.helm
            .duration
            .with_label_values(&["POST"])
            .observe(secs);
        self.router
            .duration
            .with_label_values(&[HTTP, REGULAR, HTTP, model, endpoint(route)])
            .observe(secs);
    }

    pub(super) fn ttft(&self, route: &str, secs: f64) {
        let model = model::current();
        let model = &*model;
        self.router
            .ttft
            .with_label_values(&[HTTP, REGULAR, model, endpoint(route)])
            .observe(secs);
    }

    pub(super) fn tokens(&self, route: &str, input: u64, output: Option<u64>) {
        let model = model::current();
        let model = &*model;
        let ep = endpoint(route);
        self.router
            .tokens
            .with_label_values(&[HTTP, REGULAR, model, ep, "input"])
            .inc_by(input);
        if let Some(out) = output {
            self.router
                .tokens
                .with_label_values(&[HTTP, REGULAR, model, ep, "output"])
                .inc_by(out);
        }
    }

    pub(super) fn retry(&self, route: &str, attempt: u32, secs: f64) {
        self.worker
            .retries
            .with_label_values(&[REGULAR, endpoint(route)])
            .inc();
        self.worker
            .backoff
            .with_label_values(&[attempt.to_string().as_str()])
            .observe(secs);
    }

    pub(super) fn retries_exhausted(&self, route: &str) {
        self.worker
            .retries_exhausted
            .with_label_values(&[REGULAR, endpoint(route)])
            .inc();
    }

    pub(super) fn selection(&self, policy: &str) {
        let model = model::current();
        let model = &*model;
        self.worker
            .selections
            .with_label_values(&[REGULAR, HTTP, model, policy])
            .inc();
    }

    pub(super) fn circuit_state(&self, worker: &str, code: CircuitCode, f: u32, s: u32) {
        self.circuit.state(worker, code, f, s);
    }

    pub(super) fn circuit_transition(&self, worker: &str, from: CircuitCode, to: CircuitCode) {
        self.circuit.transition(worker, from, to);
    }

    pub(super) fn refresh(&self, fleet: &Fleet) {
        let model = model::current();
        let model = &*model;
        self.worker.pool_size.reset();
        self.worker
            .pool_size
            .with_label_values(&[REGULAR, HTTP, model])
            .set(fleet.workers as i64);
        self.worker.requests_active.reset();
        for (w, v) in &fleet.in_flight {
            self.worker
                .requests_active
                .with_label_values(&[w])
                .set(*v as i64);
        }
        self.worker.health.reset();
        for (w, v) in &fleet.healthy {
            self.worker.health.with_label_values(&[w]).set(*v as i64);
        }
        self.helm
            .active_workers
            .set(fleet.healthy.iter().filter(|(_, v)| *v > 0.0).count() as i64);
        self.http.connections.set(fleet.in_flight_total());
        let (ok, failed) = fleet.health_checks;
        raise_to(
            &self
                .worker
                .health_checks
                .with_label_values(&[REGULAR, "success"]),
            ok,
        );
        raise_to(
            &self
                .worker
                .health_checks
                .with_label_values(&[REGULAR, "failure"]),
            failed,
        );
        let rejected: IntCounter = self.http.rate_limit.with_label_values(&["rejected"]);
        raise_to(&rejected, fleet.admission_refused);
        self.circuit.refresh(&fleet.worker_urls());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_under_smg_names_and_labels() {
        let r = Registry::new();
        let s = Series::new(&r);
        model::set_for_test(Some("qwen3"));
        s.request_done("chat_completions", true, 200, true, "http://a");
        s.request_done("generate", false, 503, false, "");
        s.request_done("generate", false, 500, true, "http://a");
        s.upstream_response(503);
        s.duration("chat_completions", 0.3);
        s.ttft("chat_completions", 0.01);
        s.tokens("generate", 64, Some(3));
        s.retry("generate", 0, 0.05);
        s.retries_exhausted("generate");
        s.selection("round_robin");
        s.circuit_state("http://a", CircuitCode::Open, 3, 0);
        s.refresh(&Fleet {
            workers: 2.0,
            in_flight: vec![("http://a".into(), 1.0)],
            healthy: vec![("http://a".into(), 1.0), ("http://b".into(), 0.0)],
            cache: None,
            health_checks: (5, 1),
            admission_refused: 2,
        });
        model::set_for_test(None);
        let text = crate::metrics::compat::tests_support::encode(&r);
        let base = "backend_type=\"regular\",connection_mode=\"http\"";
        for line in [
            "smg_http_requests_total{method=\"POST\",path=\"/v1/chat/completions\"} 1".to_string(),
            "smg_http_responses_total{error_code=\"\",path=\"/v1/chat/completions\",status_code=\"200\"} 1".to_string(),
            "smg_http_responses_total{error_code=\"no_workers\",path=\"/generate\",status_code=\"503\"} 1".to_string(),
            "smg_http_connections_active 1".to_string(),
            "smg_http_rate_limit_total{result=\"rejected\"} 2".to_string(),
            format!("smg_router_requests_total{{{base},endpoint=\"chat\",model=\"qwen3\",router_type=\"http\",streaming=\"true\"}} 1"),
            format!("smg_router_request_errors_total{{{base},endpoint=\"generate\",error_type=\"no_workers\",model=\"qwen3\",router_type=\"http\"}} 1"),
            format!("smg_router_request_duration_seconds_count{{{base},endpoint=\"chat\",model=\"qwen3\",router_type=\"http\"}} 1"),
            "smg_router_upstream_responses_total{error_code=\"\",router_type=\"http\",status_code=\"503\"} 1".to_string(),
            "smg_http_request_duration_seconds_count{method=\"POST\",path=\"/v1/chat/completions\"} 1".to_string(),
            "smg_router_ttft_seconds_count{backend_type=\"regular\",endpoint=\"chat\",model=\"qwen3\",router_type=\"http\"} 1".to_string(),
            "smg_router_tokens_total{backend_type=\"regular\",endpoint=\"generate\",model=\"qwen3\",router_type=\"http\",token_type=\"output\"} 3".to_string(),
            "smg_worker_retries_total{endpoint=\"generate\",worker_type=\"regular\"} 1".to_string(),
            "smg_worker_retries_exhausted_total{endpoint=\"generate\",worker_type=\"regular\"} 1".to_string(),
            "smg_worker_retry_backoff_seconds_count{attempt=\"0\"} 1".to_string(),
            "smg_worker_selection_total{connection_mode=\"http\",model=\"qwen3\",policy=\"round_robin\",worker_type=\"regular\"} 1".to_string(),
            "smg_worker_errors_total{connection_mode=\"http\",error_type=\"backend_error\",worker_type=\"regular\"} 1".to_string(),
            "smg_worker_requests_active{worker=\"http://a\"} 1".to_string(),
            "smg_worker_health{worker=\"http://b\"} 0".to_string(),
            "smg_worker_health_checks_total{result=\"failure\",worker_type=\"regular\"} 1".to_string(),
            "smg_worker_cb_state{worker=\"http://a\"} 1".to_string(),
            "smg_worker_cb_state{worker=\"http://b\"} 0".to_string(),
            "smg_worker_cb_outcomes_total{outcome=\"failure\",worker=\"http://a\"} 1".to_string(),
            "smg_requests_total{method=\"POST\",status=\"503\"} 1".to_string(),
            "smg_active_workers 1".to_string(),
        ] {
            assert!(text.contains(&line), "{line} in\n{text}");
        }
    }
}
