//! Declaring a compat flavour's series on its own registry: one helper for both flavours
//! (names, help and labels are constants, so a failure is a bug in the declaration).

use prometheus::core::Collector;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

use super::DURATION_BUCKETS;

/// Registers series on `.0` and hands them back.
pub(super) struct Declare<'r>(pub(super) &'r Registry);

impl Declare<'_> {
    /// Registers `c` (a name already taken keeps the first) and returns it.
    pub(super) fn reg<C: Collector + Clone + 'static>(&self, c: C) -> C {
        let _ = self.0.register(Box::new(c.clone()));
        c
    }

    pub(super) fn counter(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.reg(IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric"))
    }

    pub(super) fn gauge(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        self.reg(IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric"))
    }

    /// A histogram with the request-duration buckets both peers use.
    pub(super) fn histogram(&self, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
        self.reg(
            HistogramVec::new(
                HistogramOpts::new(name, help).buckets(DURATION_BUCKETS.to_vec()),
                labels,
            )
            .expect("valid metric"),
        )
    }
}
