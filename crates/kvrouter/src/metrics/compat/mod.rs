//! `--metrics-compat sgl-router|smg`: the series that sgl-router / SMG dashboards query, under
//! their own names and labels, rendered on `/metrics` after the `kvrouter_*` ones.
//!
//! Request-level series (requests, errors, durations, TTFT, retries, worker selections) are
//! recorded by the hooks below, which the per-request telemetry value
//! (`proxy::telemetry::RequestTelemetry`) calls next to the native series; each hook is
//! one atomic load when no flavour is enabled. Fleet-level series (running requests and health
//! per worker, pool size, cache hits/misses, health checks, admission refusals) are refreshed
//! at scrape time from the `kvrouter_*` families they mirror (`derive.rs`); the circuit-breaker
//! series are fed by the `circuit_*` functions (`circuit.rs`) and the `model` label by
//! `model.rs`. Names and labels come from sgl-router 0.2.x `src/metrics.rs` (`sgl_router_*`)
//! and SMG 1.13 / sgl-router 0.3.x `src/observability/metrics.rs` (`smg_*`); the families the
//! peers' dashboards and alerts query are listed in `tests/data/metrics_compat_families.tsv`
//! and docs/metrics.md.

mod circuit;
mod declare;
mod derive;
pub(crate) mod model;
mod sgl_router;
mod smg;

pub(crate) use circuit::CircuitCode;

use std::sync::OnceLock;

use prometheus::{Encoder, Registry, TextEncoder};

/// Which family of names to serve beside `kvrouter_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `sgl_router_*` (sgl-router up to 0.2.x; what older dashboards query).
    SglRouter,
    /// `smg_*` (sgl-router / sgl-model-gateway 0.3.x and SMG).
    Smg,
}

impl std::str::FromStr for Flavor {
    type Err = String;
    fn from_str(s: &str) -> Result<Flavor, String> {
        match s {
            "sgl-router" | "sgl_router" => Ok(Flavor::SglRouter),
            "smg" => Ok(Flavor::Smg),
            other => Err(format!(
                "unknown metrics compat {other:?} (expected sgl-router or smg)"
            )),
        }
    }
}

impl std::fmt::Display for Flavor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Flavor::SglRouter => "sgl-router",
            Flavor::Smg => "smg",
        })
    }
}

/// The handles of one flavour, registered in their own registry.
enum Series {
    SglRouter(sgl_router::Series),
    Smg(smg::Series),
}

struct Active {
    registry: Registry,
    series: Series,
    refresh: parking_lot::Mutex<()>,
}

static ACTIVE: OnceLock<Active> = OnceLock::new();

fn active() -> Option<&'static Active> {
    ACTIVE.get()
}

/// Enables `flavor` for the process (the first call wins; the registry is process-wide like
/// the `kvrouter_*` one). Returns the flavour that is active.
pub(crate) fn enable(flavor: Flavor) -> Flavor {
    let a = ACTIVE.get_or_init(|| {
        let registry = Registry::new();
        let series = match flavor {
            Flavor::SglRouter => Series::SglRouter(sgl_router::Series::new(&registry)),
            Flavor::Smg => Series::Smg(smg::Series::new(&registry)),
        };
        Active {
            registry,
            series,
            refresh: parking_lot::Mutex::new(()),
        }
    });
    match a.series {
        Series::SglRouter(_) => Flavor::SglRouter,
        Series::Smg(_) => Flavor::Smg,
    }
}

/// The request path of a data-plane route label (`generate` -> `/generate`).
pub(crate) fn route_path(route: &str) -> &'static str {
    match route {
        "chat_completions" => "/v1/chat/completions",
        "completions" => "/v1/completions",
        _ => "/generate",
    }
}

/// sgl-router's name of a kvrouter policy (the reverse of the `--policy` mapping).
pub(crate) fn policy_name(policy: &str) -> &'static str {
    match policy {
        "kv" => "cache_aware",
        "round-robin" => "round_robin",
        "random" => "random",
        _ => "power_of_two",
    }
}

/// A data-plane request answered with `status` (by `worker`, or by the router when
/// `from_worker` is false; `worker` may then be empty).
pub(crate) fn request_done(
    route: &'static str,
    stream: bool,
    status: u16,
    from_worker: bool,
    worker: &str,
) {
    match active().map(|a| &a.series) {
        Some(Series::SglRouter(s)) => s.request_done(route, status, from_worker, worker),
        Some(Series::Smg(s)) => s.request_done(route, stream, status, from_worker, worker),
        None => {}
    }
}

/// A worker answered one attempt with `status` (retried or relayed).
pub(crate) fn upstream_response(route: &'static str, status: u16) {
    match active().map(|a| &a.series) {
        Some(Series::SglRouter(s)) => s.upstream_response(route, status),
        Some(Series::Smg(s)) => s.upstream_response(status),
        None => {}
    }
}

/// A relayed response ended (fully sent or dropped) `secs` after the request arrived.
pub(crate) fn request_duration(route: &'static str, secs: f64) {
    match active().map(|a| &a.series) {
        Some(Series::SglRouter(s)) => s.duration(route, secs),
        Some(Series::Smg(s)) => s.duration(route, secs),
        None => {}
    }
}

/// A streamed response's first body chunk arrived `secs` after the request.
pub(crate) fn first_token(route: &'static str, secs: f64) {
    if let Some(Series::Smg(s)) = active().map(|a| &a.series) {
        s.ttft(route, secs);
    }
}

/// A KV-routed request ended: its prompt tokens and the worker-reported output tokens.
pub(crate) fn tokens(route: &'static str, input: u64, output: Option<u64>) {
    if let Some(Series::Smg(s)) = active().map(|a| &a.series) {
        s.tokens(route, input, output);
    }
}

/// Attempt `attempt` (0-based) is repeated on another worker after `delay`.
pub(crate) fn retry(route: &'static str, attempt: u32, delay: std::time::Duration) {
    let secs = delay.as_secs_f64();
    match active().map(|a| &a.series) {
        Some(Series::SglRouter(s)) => s.retry(route, attempt, secs),
        Some(Series::Smg(s)) => s.retry(route, attempt, secs),
        None => {}
    }
}

/// Every allowed attempt asked for a retry.
pub(crate) fn retries_exhausted(route: &'static str) {
    match active().map(|a| &a.series) {
        Some(Series::SglRouter(s)) => s.retries_exhausted(route),
        Some(Series::Smg(s)) => s.retries_exhausted(route),
        None => {}
    }
}

/// `policy` (a kvrouter policy name) picked `worker` for an attempt.
pub(crate) fn selection(policy: &str, worker: &impl super::subjects::SeriesWorker) {
    let Some(active) = active() else { return };
    model::seen(worker);
    match &active.series {
        Series::SglRouter(s) => s.selection(policy_name(policy), worker.url()),
        Series::Smg(s) => s.selection(policy_name(policy)),
    }
}

/// The circuit breaker of `worker` is now `state`, after `failures` consecutive failures or
/// `successes` consecutive successes (for the router's breaker to call on every change; a
/// worker never reported is shown closed).
pub(crate) fn circuit_state(worker: &str, state: CircuitCode, failures: u32, successes: u32) {
    match active().map(|a| &a.series) {
        Some(Series::SglRouter(s)) => s.circuit_state(worker, state),
        Some(Series::Smg(s)) => s.circuit_state(worker, state, failures, successes),
        None => {}
    }
}

/// The circuit breaker of `worker` moved `from` -> `to` (call with [`circuit_state`]).
pub(crate) fn circuit_transition(worker: &str, from: CircuitCode, to: CircuitCode) {
    match active().map(|a| &a.series) {
        Some(Series::SglRouter(s)) => s.circuit_transition(worker, from, to),
        Some(Series::Smg(s)) => s.circuit_transition(worker, from, to),
        None => {}
    }
}

/// The compat series in the text format (empty when none is enabled); `kvrouter` is what the
/// `kvrouter_*` registry gathered for the same scrape.
pub(crate) fn render(kvrouter: &[prometheus::proto::MetricFamily]) -> String {
    let Some(a) = active() else {
        return String::new();
    };
    {
        let _one_refresh_at_a_time = a.refresh.lock();
        let fleet = derive::Fleet::read(kvrouter);
        match &a.series {
            Series::SglRouter(s) => s.refresh(&fleet),
            Series::Smg(s) => s.refresh(&fleet),
        }
    }
    let mut buf = Vec::new();
    if TextEncoder::new()
        .encode(&a.registry.gather(), &mut buf)
        .is_err()
    {
        return String::new();
    }
    String::from_utf8(buf).unwrap_or_default()
}

/// Bucket bounds of `*_duration_seconds` in sgl-router and SMG (`start_prometheus`).
pub(crate) const DURATION_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 45.0, 60.0,
    90.0, 120.0, 180.0, 240.0,
];

#[cfg(test)]
pub(crate) mod tests_support {
    /// `r` in the text format.
    pub(crate) fn encode(r: &prometheus::Registry) -> String {
        let mut buf = Vec::new();
        prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &r.gather(), &mut buf)
            .expect("encode");
        String::from_utf8(buf).expect("utf-8")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flavors_parse_and_print() {
        assert_eq!("sgl-router".parse(), Ok(Flavor::SglRouter));
        assert_eq!("sgl_router".parse(), Ok(Flavor::SglRouter));
        assert_eq!("smg".parse(), Ok(Flavor::Smg));
        assert!("prometheus".parse::<Flavor>().is_err());
        assert_eq!(Flavor::SglRouter.to_string(), "sgl-router");
    }

    #[test]
    fn route_and_policy_names() {
        assert_eq!(route_path("chat_completions"), "/v1/chat/completions");
        assert_eq!(route_path("generate"), "/generate");
        assert_eq!(policy_name("kv"), "cache_aware");
        assert_eq!(policy_name("least-load"), "power_of_two");
    }
}
