//! Prometheus handles of shared predictions (`kvrouter_shared_predictions_*`), registered
//! once in the process-wide registry.

use std::sync::OnceLock;

use prometheus::{Counter, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts};

use crate::metrics::register;

/// All shared-prediction metrics. Get them with [`metrics()`].
pub(crate) struct SharingMetrics {
    /// Items (bookings and follow-ups) this router published.
    pub published: IntCounter,
    /// NATS messages, by `direction` (out: published; in: another replica's; own: ours, skipped).
    pub messages: IntCounterVec,
    /// Other replicas' items applied to the local index, by `kind` (book, prefilled, cancel).
    pub applied: IntCounterVec,
    /// Items not published or not applied, by `reason` (queue_full, publish_error, encode,
    /// decode, too_large, unknown_worker, unknown_id, pending_full, index).
    pub dropped: IntCounterVec,
    /// Seconds from another replica's publication to its arrival here (publisher's clock).
    pub lag_seconds: Histogram,
    /// CPU-bound seconds spent decoding and applying other replicas' messages.
    pub apply_seconds: Counter,
    /// Other replicas' bookings whose follow-up may still come.
    pub pending: IntGauge,
    /// 1 while subscribed to the shared-prediction subject.
    pub subscribed: IntGauge,
}

/// The process-wide shared-prediction metrics (registered on first use).
pub(crate) fn metrics() -> &'static SharingMetrics {
    static METRICS: OnceLock<SharingMetrics> = OnceLock::new();
    METRICS.get_or_init(SharingMetrics::new)
}

impl SharingMetrics {
    fn new() -> Self {
        let vec = |name: &str, help: &str, label: &str| {
            register(IntCounterVec::new(Opts::new(name, help), &[label]).expect("valid metric"))
        };
        SharingMetrics {
            published: register(
                IntCounter::new(
                    "kvrouter_shared_predictions_published_total",
                    "Predict-on-route bookings and follow-ups published to the other replicas",
                )
                .expect("valid metric"),
            ),
            messages: vec(
                "kvrouter_shared_predictions_messages_total",
                "Shared-prediction NATS messages, by direction (out, in, own)",
                "direction",
            ),
            applied: vec(
                "kvrouter_shared_predictions_applied_total",
                "Other replicas' bookings and follow-ups applied to the local index, by kind",
                "kind",
            ),
            dropped: vec(
                "kvrouter_shared_predictions_dropped_total",
                "Shared-prediction items not published or not applied, by reason",
                "reason",
            ),
            lag_seconds: register(
                Histogram::with_opts(
                    HistogramOpts::new(
                        "kvrouter_shared_predictions_lag_seconds",
                        "Delay from another replica's shared-prediction publication to its arrival",
                    )
                    .buckets(vec![
                        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                        0.25, 1.0,
                    ]),
                )
                .expect("valid metric"),
            ),
            apply_seconds: register(
                Counter::new(
                    "kvrouter_shared_predictions_apply_seconds_total",
                    "Seconds spent decoding and applying other replicas' shared predictions",
                )
                .expect("valid metric"),
            ),
            pending: register(
                IntGauge::new(
                    "kvrouter_shared_predictions_pending",
                    "Other replicas' bookings whose follow-up may still come",
                )
                .expect("valid metric"),
            ),
            subscribed: register(
                IntGauge::new(
                    "kvrouter_shared_predictions_subscribed",
                    "1 while subscribed to the shared-prediction subject",
                )
                .expect("valid metric"),
            ),
        }
    }
}
