//! The fleet-level values the compat series mirror, read from one scrape's `kvrouter_*`
//! families: registered workers, in-flight requests and health per worker, and the KV
//! decisions that found (or did not find) any of the request's pages on the chosen worker.

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
}

fn family<'a>(fams: &'a [MetricFamily], name: &str) -> Option<&'a MetricFamily> {
    fams.iter().find(|f| f.name() == name)
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
        Fleet {
            workers,
            in_flight: by_worker(fams, "kvrouter_worker_in_flight"),
            healthy: by_worker(fams, "kvrouter_worker_healthy"),
            cache,
        }
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
