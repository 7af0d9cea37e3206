//! Prometheus handles of the event pipeline (`kvrouter_kv_event*`), registered
//! once in the process-wide registry.

use std::sync::OnceLock;

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts};

use crate::metrics::register;

/// All event-pipeline metrics. Get them with [`metrics()`].
pub struct EventMetrics {
    /// Events received, by `type` (stored, removed, cleared, unknown).
    pub received: IntCounterVec,
    /// Event batches (SGLang) or single events (Dynamo) received, by `transport` (zmq, nats, replay).
    pub batches: IntCounterVec,
    /// Payloads that could not be decoded, by `format` (sglang, dynamo, envelope, frames).
    pub decode_errors: IntCounterVec,
    /// Events decoded but deliberately not applied, by `reason`
    /// (medium: not the GPU tier; unknown_tag; page_size: page-size mismatch;
    /// fold_unknown_parent: a folded store whose parent page is unknown).
    pub ignored: IntCounterVec,
    /// Sequence gaps detected (missing sequence numbers).
    pub gaps: IntCounter,
    /// Replay requests to a worker's replay endpoint, by `result` (ok, failed).
    pub replays: IntCounterVec,
    /// Sequence restarts (worker restarted or stream reset): the rank was cleared.
    pub restarts: IntCounter,
    /// Ranks cleared and marked recovering because a gap could not be replayed
    /// (or a batch could not be decoded).
    pub recoveries: IntCounter,
    /// Ranks cleared and marked recovering because their index entries went past the
    /// worker's KV capacity cap, by `worker` (URL).
    pub index_cap_exceeded: IntCounterVec,
    /// Ranks currently recovering.
    pub recovering_ranks: IntGauge,
    /// Duplicate or stale batches skipped.
    pub duplicates: IntCounter,
    /// Stored events whose block size or token count disagrees with the page size.
    pub page_size_mismatches: IntCounter,
    /// Seconds between a batch's worker timestamp and its arrival here.
    pub lag_seconds: Histogram,
    /// The NATS / JetStream side: unknown workers, the relay, catching up.
    pub nats: NatsMetrics,
    /// Live event sources (ZMQ tasks and NATS consumers).
    pub sources: IntGauge,
    /// ZMQ batches dropped because the source does not trust its endpoint now, by `reason`
    /// (removed, incarnation, unhealthy, unconfirmed; see `events::trust`).
    pub untrusted: IntCounterVec,
}

/// The event metrics of NATS and JetStream feeds and of the relay.
pub struct NatsMetrics {
    /// NATS messages naming a worker this router does not know (or not anymore).
    pub unknown_worker: IntCounter,
    /// Batches republished to NATS by the relay, by `result` (ok, error, dropped, standby).
    pub relayed: IntCounterVec,
    /// Workers whose JetStream relay lock this router holds now.
    pub relay_locks_held: IntGauge,
    /// Workers whose JetStream feed has not yet replayed the stream up to where it stood
    /// when the feed started (the index is rebuilding; `/readiness` waits).
    pub catching_up: IntGauge,
}

/// The process-wide event metrics (registered on first use).
pub fn metrics() -> &'static EventMetrics {
    static METRICS: OnceLock<EventMetrics> = OnceLock::new();
    METRICS.get_or_init(EventMetrics::new)
}

fn counter(name: &str, help: &str) -> IntCounter {
    register(IntCounter::new(name, help).expect("valid metric"))
}

fn counter_vec(name: &str, help: &str, label: &str) -> IntCounterVec {
    register(IntCounterVec::new(Opts::new(name, help), &[label]).expect("valid metric"))
}

fn gauge(name: &str, help: &str) -> IntGauge {
    register(IntGauge::new(name, help).expect("valid metric"))
}

/// `kvrouter_kv_event_lag_seconds`.
fn lag_histogram() -> Histogram {
    let lag = HistogramOpts::new(
        "kvrouter_kv_event_lag_seconds",
        "Delay between a KV event batch's worker timestamp and its arrival",
    )
    .buckets(vec![
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ]);
    register(Histogram::with_opts(lag).expect("valid metric"))
}

impl NatsMetrics {
    fn new() -> Self {
        Self {
            unknown_worker: counter(
                "kvrouter_kv_event_unknown_worker_total",
                "NATS KV event messages naming an unknown worker",
            ),
            relayed: counter_vec(
                "kvrouter_kv_event_relayed_total",
                "KV event batches republished to NATS, by result (standby: buffered, another relay holds the lock)",
                "result",
            ),
            relay_locks_held: gauge(
                "kvrouter_kv_relay_locks_held",
                "Workers whose JetStream relay lock this router holds",
            ),
            catching_up: gauge(
                "kvrouter_kv_event_catching_up",
                "Workers whose JetStream KV event feed is still replaying the stream",
            ),
        }
    }
}

impl EventMetrics {
    fn new() -> Self {
        Self {
            received: counter_vec(
                "kvrouter_kv_events_received_total",
                "KV events received, by event type",
                "type",
            ),
            batches: counter_vec(
                "kvrouter_kv_event_batches_total",
                "KV event batches received, by transport",
                "transport",
            ),
            decode_errors: counter_vec(
                "kvrouter_kv_event_decode_errors_total",
                "KV event payloads that could not be decoded, by format",
                "format",
            ),
            ignored: counter_vec(
                "kvrouter_kv_events_ignored_total",
                "KV events decoded but not applied, by reason",
                "reason",
            ),
            gaps: counter(
                "kvrouter_kv_event_gaps_total",
                "Sequence gaps detected in per-(worker, rank) KV event streams",
            ),
            replays: counter_vec(
                "kvrouter_kv_event_replays_total",
                "Replay requests sent to worker replay endpoints, by result",
                "result",
            ),
            restarts: counter(
                "kvrouter_kv_event_restarts_total",
                "KV event stream restarts (sequence went backwards): rank cleared",
            ),
            recoveries: counter(
                "kvrouter_kv_event_recoveries_total",
                "Ranks cleared and marked recovering after unrecoverable event loss",
            ),
            index_cap_exceeded: counter_vec(
                "kvrouter_kv_index_cap_exceeded_total",
                "Worker ranks cleared and marked recovering because their KV index entries \
                 went past the worker's KV capacity (max_total_num_tokens / page size + slack)",
                "worker",
            ),
            recovering_ranks: gauge(
                "kvrouter_kv_event_recovering_ranks",
                "Worker ranks currently recovering from event loss",
            ),
            duplicates: counter(
                "kvrouter_kv_event_duplicates_total",
                "Duplicate or stale KV event batches skipped",
            ),
            page_size_mismatches: counter(
                "kvrouter_kv_event_page_size_mismatch_total",
                "Stored events whose block size or token count disagrees with the page size",
            ),
            lag_seconds: lag_histogram(),
            nats: NatsMetrics::new(),
            sources: gauge(
                "kvrouter_kv_event_sources",
                "Live KV event sources (ZMQ subscriptions and NATS consumers)",
            ),
            untrusted: counter_vec(
                "kvrouter_kv_events_untrusted_total",
                "ZMQ KV event batches dropped: the worker was removed, restarted, unhealthy, or \
                 not yet confirmed by a health round after the subscription reconnected",
                "reason",
            ),
        }
    }
}
