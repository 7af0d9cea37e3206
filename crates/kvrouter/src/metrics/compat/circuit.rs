//! The circuit-breaker series of both flavours (`smg_worker_cb_*`, `sgl_router_cb_*`): state per
//! worker (0 closed, 1 open, 2 half-open, as both peers encode it), transitions and outcomes.
//!
//! The router's breaker reports through the `compat::circuit_*` functions; a registered worker
//! it has said nothing about is shown closed (what a worker without a breaker is), and a
//! worker that left the fleet loses its series at the next scrape. Outcomes (success/failure
//! of each worker answer) are recorded by the data plane, like the peers' `record_outcome`.

use prometheus::core::Collector;
use prometheus::{IntCounterVec, IntGaugeVec};

use super::declare::Declare;

/// A breaker state, with the peers' gauge encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CircuitCode {
    Closed = 0,
    Open = 1,
    HalfOpen = 2,
}

impl CircuitCode {
    /// The peers' transition label value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            CircuitCode::Closed => "closed",
            CircuitCode::Open => "open",
            CircuitCode::HalfOpen => "half_open",
        }
    }
}

/// The family names of one flavour.
pub(super) struct Names {
    pub state: &'static str,
    pub transitions: &'static str,
    pub outcomes: &'static str,
    /// SMG only: consecutive failures / successes gauges.
    pub consecutive: Option<(&'static str, &'static str)>,
}

pub(super) struct Series {
    state: IntGaugeVec,
    transitions: IntCounterVec,
    outcomes: IntCounterVec,
    consecutive: Option<(IntGaugeVec, IntGaugeVec)>,
}

impl Series {
    pub(super) fn new(d: &Declare<'_>, n: &Names) -> Series {
        let worker = &["worker"];
        Series {
            state: d.gauge(
                n.state,
                "Circuit breaker state per worker (0=closed, 1=open, 2=half_open)",
                worker,
            ),
            transitions: d.counter(
                n.transitions,
                "Circuit breaker state transitions by worker",
                &["worker", "from", "to"],
            ),
            outcomes: d.counter(
                n.outcomes,
                "Circuit breaker outcomes by worker and outcome (success/failure)",
                &["worker", "outcome"],
            ),
            consecutive: n.consecutive.map(|(f, s)| {
                (
                    d.gauge(f, "Consecutive failures per worker", worker),
                    d.gauge(s, "Consecutive successes per worker", worker),
                )
            }),
        }
    }

    pub(super) fn state(&self, worker: &str, code: CircuitCode, failures: u32, successes: u32) {
        self.state.with_label_values(&[worker]).set(code as i64);
        if let Some((f, s)) = &self.consecutive {
            f.with_label_values(&[worker]).set(i64::from(failures));
            s.with_label_values(&[worker]).set(i64::from(successes));
        }
    }

    pub(super) fn transition(&self, worker: &str, from: CircuitCode, to: CircuitCode) {
        self.transitions
            .with_label_values(&[worker, from.label(), to.label()])
            .inc();
    }

    pub(super) fn outcome(&self, worker: &str, success: bool) {
        let outcome = if success { "success" } else { "failure" };
        self.outcomes.with_label_values(&[worker, outcome]).inc();
    }

    /// Every worker of `fleet` has a state (closed unless reported); others lose theirs.
    pub(super) fn refresh(&self, fleet: &[String]) {
        let mut gauges = vec![&self.state];
        if let Some((f, s)) = &self.consecutive {
            gauges.extend([f, s]);
        }
        for g in gauges {
            for w in labelled_workers(g) {
                if !fleet.contains(&w) {
                    let _ = g.remove_label_values(&[w.as_str()]);
                }
            }
            for w in fleet {
                // Creates the series at 0 (closed) when absent; keeps a reported value.
                let _ = g.with_label_values(&[w.as_str()]);
            }
        }
    }
}

fn labelled_workers(g: &IntGaugeVec) -> Vec<String> {
    g.collect()
        .iter()
        .flat_map(|f| f.get_metric())
        .filter_map(|m| {
            m.get_label()
                .iter()
                .find(|l| l.name() == "worker")
                .map(|l| l.value().to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreported_workers_are_closed_and_departed_ones_dropped() {
        let r = prometheus::Registry::new();
        let s = Series::new(&Declare(&r), &super::super::smg::CIRCUIT);
        s.state("http://a", CircuitCode::Open, 5, 0);
        s.state("http://gone", CircuitCode::HalfOpen, 0, 1);
        s.transition("http://a", CircuitCode::Closed, CircuitCode::Open);
        s.outcome("http://a", false);
        s.refresh(&["http://a".to_string(), "http://b".to_string()]);
        let text = crate::metrics::compat::tests_support::encode(&r);
        for line in [
            "smg_worker_cb_state{worker=\"http://a\"} 1",
            "smg_worker_cb_state{worker=\"http://b\"} 0",
            "smg_worker_cb_consecutive_failures{worker=\"http://a\"} 5",
            "smg_worker_cb_transitions_total{from=\"closed\",to=\"open\",worker=\"http://a\"} 1",
            "smg_worker_cb_outcomes_total{outcome=\"failure\",worker=\"http://a\"} 1",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert!(!text.contains("http://gone"), "{text}");
    }
}
