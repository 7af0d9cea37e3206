//! Per-rank PD queue gauges for `/v1/loads`' `disaggregation` section (SGLang 0.5.23
//! `DisaggregationMetrics`, `managers/load_snapshot.py`, filled by
//! `SchedulerLoadInquirer.get_loads`, `scheduler_components/load_inquirer.py`): a prefill
//! counts requests waiting for their decode peer (`prefill_bootstrap_queue_reqs`) and
//! transferring (`prefill_inflight_queue_reqs`); a decode counts requests waiting for the
//! prefill (`decode_prealloc_queue_reqs`). Each count is held by an RAII [`Held`] guard, so a
//! dropped request never leaks one. The last transfer's speed and latency are kept too.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

/// Which queue a request is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    PrefillBootstrap,
    PrefillInflight,
    DecodePrealloc,
    DecodeTransfer,
}

/// The gauges of one rank.
#[derive(Debug, Default)]
pub struct Gauges {
    counts: [AtomicUsize; 4],
    last_speed_gb_s: AtomicU64,
    last_latency_ms: AtomicU64,
}

/// A request counted in a queue until dropped.
#[derive(Debug)]
pub struct Held {
    gauges: Arc<Gauges>,
    queue: Queue,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.gauges.counts[self.queue as usize].fetch_sub(1, Ordering::Relaxed);
    }
}

impl Gauges {
    /// Counts one request in `queue` while the guard lives.
    pub fn hold(self: &Arc<Self>, queue: Queue) -> Held {
        self.counts[queue as usize].fetch_add(1, Ordering::Relaxed);
        Held {
            gauges: self.clone(),
            queue,
        }
    }

    /// Records a finished transfer of `bytes` over `secs` of model time.
    pub fn transfer_done(&self, bytes: f64, secs: f64) {
        if secs > 0.0 {
            let speed = bytes / secs / 1e9;
            self.last_speed_gb_s
                .store(speed.to_bits(), Ordering::Relaxed);
        }
        self.last_latency_ms
            .store((secs * 1000.0).to_bits(), Ordering::Relaxed);
    }

    fn count(&self, q: Queue) -> usize {
        self.counts[q as usize].load(Ordering::Relaxed)
    }

    /// The `disaggregation` section (`DisaggregationMetrics` field order).
    pub fn section(&self, mode: &str) -> Value {
        json!({
            "mode": mode,
            "prefill_bootstrap_queue_reqs": self.count(Queue::PrefillBootstrap),
            "prefill_inflight_queue_reqs": self.count(Queue::PrefillInflight),
            "decode_prealloc_queue_reqs": self.count(Queue::DecodePrealloc),
            "decode_transfer_queue_reqs": self.count(Queue::DecodeTransfer),
            "decode_retracted_queue_reqs": 0,
            "kv_transfer_speed_gb_s": f64::from_bits(self.last_speed_gb_s.load(Ordering::Relaxed)),
            "kv_transfer_latency_ms": f64::from_bits(self.last_latency_ms.load(Ordering::Relaxed)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_count_and_release() {
        let g = Arc::new(Gauges::default());
        let a = g.hold(Queue::PrefillBootstrap);
        let b = g.hold(Queue::PrefillBootstrap);
        assert_eq!(g.section("prefill")["prefill_bootstrap_queue_reqs"], 2);
        drop(a);
        drop(b);
        let s = g.section("prefill");
        assert_eq!(s["prefill_bootstrap_queue_reqs"], 0);
        assert_eq!(s["kv_transfer_speed_gb_s"], 0.0);
        g.transfer_done(25e9, 1.0);
        assert_eq!(g.section("prefill")["kv_transfer_speed_gb_s"], 25.0);
    }
}
