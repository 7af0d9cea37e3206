//! Relay mode: republishes the batches this router accepts from worker ZMQ
//! streams to NATS (envelope in `nats_envelope`), so that router replicas without
//! their own ZMQ subscriptions share one feed. One publishing task keeps order.
//! Two transports: core NATS ([`NatsRelay::start`], every relay publishes) or a
//! JetStream stream ([`NatsRelay::start_jetstream`], one lock-holding relay per worker,
//! see `js_relay`).

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::warn;

use super::feed::ResetReason;
use super::jetstream::JetStreamSetup;
use super::metrics::metrics;
use super::nats_envelope::{encode_headers, relay_subject, RelayedBatch};

/// Batches waiting to be published; beyond this the relay drops (and consumers
/// see a gap and recover).
pub(crate) const RELAY_QUEUE: usize = 65_536;

/// The relay's publishing task. Dropping it stops publishing.
pub struct NatsRelay {
    sender: RelaySender,
    task: JoinHandle<()>,
}

/// Cheap handle that ZMQ sources use to hand accepted batches to the relay.
#[derive(Clone)]
pub struct RelaySender {
    tx: mpsc::Sender<RelayedBatch>,
}

impl NatsRelay {
    /// Starts publishing on `<prefix>.<worker-key>.<rank>` through `client`.
    pub fn start(
        tasks: &crate::tasks::Tasks,
        client: async_nats::Client,
        prefix: impl Into<String>,
    ) -> Self {
        let prefix: Arc<str> = prefix.into().into();
        let (tx, mut rx) = mpsc::channel::<RelayedBatch>(RELAY_QUEUE);
        let task = tasks.spawn("nats relay", async move {
            let mut warned = false;
            while let Some(batch) = rx.recv().await {
                let subject = relay_subject(&prefix, &batch.worker_url, batch.rank);
                let headers = encode_headers(&batch);
                match client
                    .publish_with_headers(subject, headers, batch.payload)
                    .await
                {
                    Ok(()) => metrics().nats.relayed.with_label_values(&["ok"]).inc(),
                    Err(e) => {
                        metrics().nats.relayed.with_label_values(&["error"]).inc();
                        if !std::mem::replace(&mut warned, true) {
                            warn!(error = %e, "kv events relay: NATS publish failed");
                        }
                    }
                }
            }
        });
        Self {
            sender: RelaySender { tx },
            task,
        }
    }

    /// Starts publishing into the JetStream stream of `setup`, for the workers whose relay
    /// lock (bucket `setup.config.lock_bucket`) relay instance `instance` holds.
    pub async fn start_jetstream(
        tasks: &crate::tasks::Tasks,
        setup: JetStreamSetup,
        instance: String,
    ) -> anyhow::Result<Self> {
        let locks = setup.lock_bucket().await?;
        let (tx, rx) = mpsc::channel::<RelayedBatch>(RELAY_QUEUE);
        let run = super::js_relay::run(tasks.clone(), setup, locks, instance, rx);
        let task = tasks.spawn("jetstream relay", run);
        Ok(Self {
            sender: RelaySender { tx },
            task,
        })
    }

    /// A handle for ZMQ sources.
    pub fn sender(&self) -> RelaySender {
        self.sender.clone()
    }
}

impl Drop for NatsRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RelaySender {
    /// Queues one accepted batch; drops it (counted) when the queue is full.
    pub fn send(
        &self,
        worker_url: &str,
        rank: u32,
        seq: u64,
        reset: Option<ResetReason>,
        payload: Bytes,
    ) {
        let batch = RelayedBatch {
            worker_url: worker_url.to_owned(),
            rank,
            seq,
            reset,
            payload,
        };
        if self.tx.try_send(batch).is_err() {
            metrics().nats.relayed.with_label_values(&["dropped"]).inc();
        }
    }
}
