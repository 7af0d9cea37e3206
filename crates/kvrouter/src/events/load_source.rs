//! Load source: one task per (worker, rank) subscribing to SGLang's opt-in load publisher
//! (`--load-publish-endpoint`, advertised in `/server_info` `kv_events` as
//! `load_endpoint_port_base` + `load_topic`), decoding each `LoadStat` ([`super::load_wire`])
//! and handing it to a [`LoadSink`]; with the `kvrouter_engine_load_*` metrics.
//!
//! The publisher (`managers/scheduler_components/load_publisher.py`
//! `SchedulerLoadPublisher`) is a plain PUB (HWM 8, no replay) sending
//! `[b"load", seq (8 B BE), payload]` after batches and at least once a second while idle, so
//! the sequence is not checked: a report replaces the previous one. The task stops when its
//! [`SourceHandle`] drops (worker removed or restarted, router shutdown); its gauges go with it.

use std::sync::{Arc, OnceLock};

use prometheus::{IntCounterVec, IntGaugeVec, Opts};
use tracing::{debug, warn};
use zeromq::{Socket, SocketOptions, SocketRecv, SubSocket, ZmqMessage};

use super::handle::SourceHandle;
use super::load_wire::{decode_load_stat, LoadStat};
// The same connect timeout and resubscribe schedule as the KV event source.
use super::zmq_source::{CONNECT_TIMEOUT, RESUBSCRIBE_BACKOFF};
use crate::metrics::register;
use crate::workers::{Rank, WorkerId};

/// Where decoded load reports go (the KV policy's unit loads).
pub trait LoadSink: Send + Sync + 'static {
    fn report(&self, worker: WorkerId, rank: Rank, stat: &LoadStat);
}

/// What to subscribe to for one (worker, rank).
#[derive(Debug, Clone)]
pub struct LoadSourceConfig {
    pub worker: WorkerId,
    /// The worker's URL: its label in logs and metrics.
    pub worker_url: String,
    pub rank: Rank,
    /// Load PUB endpoint to dial, e.g. `tcp://10.0.0.5:19003`.
    pub endpoint: String,
    /// Topic frame (`"load"`).
    pub topic: String,
}

/// Prometheus handles of the load feed.
struct LoadMetrics {
    running: IntGaugeVec,
    waiting: IntGaugeVec,
    reports: IntCounterVec,
}

fn metrics() -> &'static LoadMetrics {
    static METRICS: OnceLock<LoadMetrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let gauge = |name: &str, help: &str| {
            register(
                IntGaugeVec::new(Opts::new(name, help), &["worker", "rank"]).expect("valid metric"),
            )
        };
        LoadMetrics {
            running: gauge(
                "kvrouter_engine_load_running",
                "Running requests the worker's load publisher last reported, per DP rank",
            ),
            waiting: gauge(
                "kvrouter_engine_load_waiting",
                "Waiting requests the worker's load publisher last reported, per DP rank",
            ),
            reports: register(
                IntCounterVec::new(
                    Opts::new(
                        "kvrouter_engine_load_reports_total",
                        "Load publisher reports received, by result (ok, decode_error, frames)",
                    ),
                    &["result"],
                )
                .expect("valid metric"),
            ),
        }
    })
}

/// Spawner of load subscriptions.
pub struct LoadSource;

impl LoadSource {
    /// Starts subscribing (inside a tokio runtime); drop the handle to stop.
    pub fn spawn(
        tasks: &crate::tasks::Tasks,
        config: LoadSourceConfig,
        sink: Arc<dyn LoadSink>,
    ) -> SourceHandle {
        SourceHandle::new(tasks.spawn("load source", run(config, sink)))
    }
}

/// Removes the source's gauge series when the task ends or is aborted.
struct Series {
    worker: String,
    rank: String,
}

impl Drop for Series {
    fn drop(&mut self) {
        let labels = [self.worker.as_str(), self.rank.as_str()];
        let _ = metrics().running.remove_label_values(&labels);
        let _ = metrics().waiting.remove_label_values(&labels);
    }
}

async fn run(config: LoadSourceConfig, sink: Arc<dyn LoadSink>) {
    let series = Series {
        worker: config.worker_url.clone(),
        rank: config.rank.to_string(),
    };
    let mut backoff = RESUBSCRIBE_BACKOFF.start();
    let mut failures = 0u32;
    loop {
        let mut options = SocketOptions::default();
        options.connect_timeout(CONNECT_TIMEOUT);
        let mut socket = SubSocket::with_options(options);
        let connected = async {
            socket.connect(&config.endpoint).await?;
            socket.subscribe(&config.topic).await
        };
        if let Err(e) = connected.await {
            failures += 1;
            if failures == 1 || failures.is_power_of_two() {
                warn!(worker = %config.worker_url, rank = config.rank, endpoint = %config.endpoint, error = %e, failures, "engine load: cannot subscribe, retrying");
            }
            tokio::time::sleep(backoff.next_delay()).await;
            continue;
        }
        failures = 0;
        backoff.reset();
        debug!(worker = %config.worker_url, rank = config.rank, endpoint = %config.endpoint, "engine load: subscribed");
        loop {
            match socket.recv().await {
                Ok(message) => on_message(&config, &series, sink.as_ref(), message),
                Err(e) => {
                    debug!(worker = %config.worker_url, rank = config.rank, error = %e, "engine load: subscription lost, reconnecting");
                    break;
                }
            }
        }
        tokio::time::sleep(backoff.current()).await;
    }
}

fn on_message(config: &LoadSourceConfig, series: &Series, sink: &dyn LoadSink, msg: ZmqMessage) {
    let m = metrics();
    // `[topic, seq, payload]`: the payload is the last frame (the seq is not checked).
    let Some(payload) = msg.into_vec().pop() else {
        m.reports.with_label_values(&["frames"]).inc();
        return;
    };
    match decode_load_stat(&payload) {
        Ok(stat) => {
            m.reports.with_label_values(&["ok"]).inc();
            let labels = [series.worker.as_str(), series.rank.as_str()];
            m.running
                .with_label_values(&labels)
                .set(i64::try_from(stat.num_running_reqs).unwrap_or(i64::MAX));
            m.waiting
                .with_label_values(&labels)
                .set(i64::try_from(stat.num_waiting_reqs).unwrap_or(i64::MAX));
            sink.report(config.worker, config.rank, &stat);
        }
        Err(e) => {
            m.reports.with_label_values(&["decode_error"]).inc();
            debug!(worker = %config.worker_url, rank = config.rank, error = %e, "engine load: undecodable report");
        }
    }
}
