//! Prometheus handles of the fleet (`kvrouter_worker*`), registered once per process
//! in the shared registry. Per-worker gauges are labelled with the worker URL.

use std::sync::OnceLock;

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts};

/// All fleet metrics.
#[derive(Debug)]
pub(crate) struct FleetMetrics {
    /// `kvrouter_workers_total`: registered workers (any state).
    pub workers_total: IntGauge,
    /// `kvrouter_worker_healthy{worker}`: 1 healthy, 0 unhealthy.
    pub healthy: IntGaugeVec,
    /// `kvrouter_worker_in_flight{worker}`: requests dispatched and not finished.
    pub in_flight: IntGaugeVec,
    /// `kvrouter_worker_health_checks_total{result}`: periodic checks, ok|failed.
    pub health_checks: IntCounterVec,
    /// `kvrouter_worker_registrations_total{result}`: ok|refused.
    pub registrations: IntCounterVec,
    /// `kvrouter_worker_restarts_total`: restarts detected behind a registered URL.
    pub restarts: IntCounter,
    /// `kvrouter_worker_circuit_state{worker}`: 0 closed, 1 open, 2 half-open.
    pub circuit_state: IntGaugeVec,
    /// `kvrouter_worker_circuit_transitions_total{worker,from,to}`.
    pub circuit_transitions: IntCounterVec,
}

impl FleetMetrics {
    /// The process-wide handles.
    pub(super) fn get() -> &'static FleetMetrics {
        static M: OnceLock<FleetMetrics> = OnceLock::new();
        M.get_or_init(|| {
            use crate::metrics::register;
            // Names and labels are static and valid: construction cannot fail.
            FleetMetrics {
                workers_total: register(
                    IntGauge::new("kvrouter_workers_total", "Registered workers (any state)")
                        .expect("valid metric"),
                ),
                healthy: register(
                    IntGaugeVec::new(
                        Opts::new(
                            "kvrouter_worker_healthy",
                            "1 if the worker is healthy, else 0",
                        ),
                        &["worker"],
                    )
                    .expect("valid metric"),
                ),
                in_flight: register(
                    IntGaugeVec::new(
                        Opts::new(
                            "kvrouter_worker_in_flight",
                            "Requests dispatched to the worker whose response has not ended",
                        ),
                        &["worker"],
                    )
                    .expect("valid metric"),
                ),
                health_checks: register(
                    IntCounterVec::new(
                        Opts::new(
                            "kvrouter_worker_health_checks_total",
                            "Periodic worker health checks by result",
                        ),
                        &["result"],
                    )
                    .expect("valid metric"),
                ),
                registrations: register(
                    IntCounterVec::new(
                        Opts::new(
                            "kvrouter_worker_registrations_total",
                            "Worker registration attempts by result",
                        ),
                        &["result"],
                    )
                    .expect("valid metric"),
                ),
                restarts: register(
                    IntCounter::new(
                        "kvrouter_worker_restarts_total",
                        "Worker restarts detected behind a registered URL",
                    )
                    .expect("valid metric"),
                ),
                circuit_state: register(
                    IntGaugeVec::new(
                        Opts::new(
                            "kvrouter_worker_circuit_state",
                            "Circuit breaker state of the worker: 0 closed, 1 open, 2 half-open",
                        ),
                        &["worker"],
                    )
                    .expect("valid metric"),
                ),
                circuit_transitions: register(
                    IntCounterVec::new(
                        Opts::new(
                            "kvrouter_worker_circuit_transitions_total",
                            "Circuit breaker state changes of the worker",
                        ),
                        &["worker", "from", "to"],
                    )
                    .expect("valid metric"),
                ),
            }
        })
    }

    /// Per-worker gauges `(in_flight, healthy)` for `url`.
    pub(super) fn worker_gauges(&self, url: &str) -> (IntGauge, IntGauge) {
        (
            self.in_flight.with_label_values(&[url]),
            self.healthy.with_label_values(&[url]),
        )
    }

    /// The circuit-state gauge for `url`.
    pub(super) fn circuit_gauge(&self, url: &str) -> IntGauge {
        self.circuit_state.with_label_values(&[url])
    }

    /// Counts one circuit transition of `url`.
    pub(super) fn circuit_transition(&self, url: &str, t: super::breaker::Transition) {
        self.circuit_transitions
            .with_label_values(&[url, t.from.as_str(), t.to.as_str()])
            .inc();
    }

    /// Drops the per-worker series of a removed worker.
    pub(super) fn forget_worker(&self, url: &str) {
        let _ = self.in_flight.remove_label_values(&[url]);
        let _ = self.healthy.remove_label_values(&[url]);
        let _ = self.circuit_state.remove_label_values(&[url]);
        for (from, to) in [
            ("closed", "open"),
            ("open", "half_open"),
            ("half_open", "closed"),
            ("half_open", "open"),
        ] {
            let _ = self
                .circuit_transitions
                .remove_label_values(&[url, from, to]);
        }
    }

    pub(super) fn health_check(&self, ok: bool) {
        self.health_checks
            .with_label_values(&[if ok { "ok" } else { "failed" }])
            .inc();
    }

    pub(super) fn registration(&self, ok: bool) {
        self.registrations
            .with_label_values(&[if ok { "ok" } else { "refused" }])
            .inc();
    }
}
