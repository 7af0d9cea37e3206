//! The fleet-level values the compat series mirror, read from one scrape's `kvrouter_*`
//! families: registered workers, in-flight requests and health per worker, health-check
//! results, admission refusals, and the KV decisions that found (or did not find) any of the
//! request's pages on the chosen worker.

use prometheus::proto::{MetricFamily, MetricType};

/// What one scrape of the `kvrouter_*` registry says about the fleet.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Fleet {
    /// `kvrouter_workers_total`.
    pub workers: f64,
    /// `kvrouter_worker_in_flight` by `worker`.
    pub in_flight: Vec<(String, f64)>,
    /// `kvrouter_worker_healthy` by `worker`.
    pub healthy: Vec<(String, f64)>,
    /// From `kvrouter_kv_overlap_ratio` (KV mode only): `(hits, misses)`, a miss being a
    /// decision whose chosen worker held none of the request's pages (ratio <= 0).
    pub cache: Option<(u64, u64)>,
    /// `kvrouter_worker_health_checks_total`: `(ok, failed)`.
    pub health_checks: (u64, u64),
    /// `kvrouter_limit_trips_total{limit="max_concurrent_requests"}`: requests refused 429.
    pub admission_refused: u64,
}

fn family<'a>(fams: &'a [MetricFamily], name: &str) -> Option<&'a MetricFamily> {
    fams.iter().find(|f| f.name() == name)
}

/// The counter of `name` whose `label` is `value` (0 when absent).
fn counter_where(fams: &[MetricFamily], name: &str, label: &str, value: &str) -> u64 {
    family(fams, name)
        .map(|f| {
            f.get_metric()
                .iter()
                .filter(|m| {
                    m.get_label()
                        .iter()
                        .any(|l| l.name() == label && l.value() == value)
                })
                .map(|m| m.get_counter().get_value() as u64)
                .sum()
        })
        .unwrap_or(0)
}

fn by_worker(fams: &[MetricFamily], name: &str) -> Vec<(String, f64)> {
    let Some(f) = family(fams, name) else {
        return Vec::new();
    };
    f.get_metric()
        .iter()
        .filter_map(|m| {
            let worker = m.get_label().iter().find(|l| l.name() == "worker")?;
            Some((worker.value().to_string(), m.get_gauge().get_value()))
        })
        .collect()
}

impl Fleet {
    pub(super) fn read(fams: &[MetricFamily]) -> Fleet {
        let workers = family(fams, "kvrouter_workers_total")
            .and_then(|f| f.get_metric().first())
            .map(|m| m.get_gauge().get_value())
            .unwrap_or(0.0);
        let cache = family(fams, "kvrouter_kv_overlap_ratio")
            .filter(|f| f.get_field_type() == MetricType::HISTOGRAM)
            .and_then(|f| f.get_metric().first())
            .map(|m| {
                let h = m.get_histogram();
                let misses = h
                    .get_bucket()
                    .iter()
                    .find(|b| b.upper_bound() <= 0.0)
                    .map(|b| b.cumulative_count())
                    .unwrap_or(0);
                (h.get_sample_count().saturating_sub(misses), misses)
            });
        let checks = "kvrouter_worker_health_checks_total";
        Fleet {
            workers,
            in_flight: by_worker(fams, "kvrouter_worker_in_flight"),
            healthy: by_worker(fams, "kvrouter_worker_healthy"),
            cache,
            health_checks: (
                counter_where(fams, checks, "result", "ok"),
                counter_where(fams, checks, "result", "failed"),
            ),
            admission_refused: counter_where(
                fams,
                "kvrouter_limit_trips_total",
                "limit",
                "max_concurrent_requests",
            ),
        }
    }

    /// Every registered worker's URL (the health gauge has one series per worker).
    pub(super) fn worker_urls(&self) -> Vec<String> {
        self.healthy.iter().map(|(w, _)| w.clone()).collect()
    }

    /// Requests in flight on the whole fleet.
    pub(super) fn in_flight_total(&self) -> i64 {
        self.in_flight.iter().map(|(_, v)| *v as i64).sum()
    }
}

/// Raises `counter` to `target` (counters never go down; a lower target is ignored).
pub(super) fn raise_to(counter: &prometheus::IntCounter, target: u64) {
    let now = counter.get();
    if target > now {
        counter.inc_by(target - now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{Histogram, HistogramOpts, IntGauge, IntGaugeVec, Opts, Registry};

    #[test]
    fn reads_workers_in_flight_health_and_cache_outcomes() {
        let r = Registry::new();
        let total = IntGauge::new("kvrouter_workers_total", "t").unwrap();
        let in_flight =
            IntGaugeVec::new(Opts::new("kvrouter_worker_in_flight", "f"), &["worker"]).unwrap();
        let healthy =
            IntGaugeVec::new(Opts::new("kvrouter_worker_healthy", "h"), &["worker"]).unwrap();
        let overlap = Histogram::with_opts(
            HistogramOpts::new("kvrouter_kv_overlap_ratio", "o").buckets(vec![0.0, 0.5, 1.0]),
        )
        .unwrap();
        r.register(Box::new(total.clone())).unwrap();
        r.register(Box::new(in_flight.clone())).unwrap();
        r.register(Box::new(healthy.clone())).unwrap();
        r.register(Box::new(overlap.clone())).unwrap();
        let checks = prometheus::IntCounterVec::new(
            Opts::new("kvrouter_worker_health_checks_total", "c"),
            &["result"],
        )
        .unwrap();
        let trips = prometheus::IntCounterVec::new(
            Opts::new("kvrouter_limit_trips_total", "l"),
            &["limit"],
        )
        .unwrap();
        r.register(Box::new(checks.clone())).unwrap();
        r.register(Box::new(trips.clone())).unwrap();
        checks.with_label_values(&["ok"]).inc_by(4);
        checks.with_label_values(&["failed"]).inc();
        trips
            .with_label_values(&["max_concurrent_requests"])
            .inc_by(2);
        trips.with_label_values(&["max_connections"]).inc();
        total.set(2);
        in_flight.with_label_values(&["http://a"]).set(3);
        healthy.with_label_values(&["http://a"]).set(1);
        healthy.with_label_values(&["http://b"]).set(0);
        for ratio in [0.0, 0.0, 0.4, 1.0] {
            overlap.observe(ratio);
        }
        let f = Fleet::read(&r.gather());
        assert_eq!(f.workers, 2.0);
        assert_eq!(f.in_flight, vec![("http://a".to_string(), 3.0)]);
        assert_eq!(f.healthy.len(), 2);
        assert_eq!(f.cache, Some((2, 2)));
        assert_eq!(f.health_checks, (4, 1));
        assert_eq!(f.admission_refused, 2);
        assert_eq!(f.in_flight_total(), 3);
        assert_eq!(f.worker_urls().len(), 2);
        assert_eq!(Fleet::read(&[]), Fleet::default());
    }

    #[test]
    fn raise_to_only_goes_up() {
        let c = prometheus::IntCounter::new("c", "c").unwrap();
        raise_to(&c, 5);
        raise_to(&c, 3);
        assert_eq!(c.get(), 5);
    }
}
