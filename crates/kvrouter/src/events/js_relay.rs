//! The relay's JetStream publisher: publishes each accepted batch into the stream only
//! for workers whose relay lock (`relay_lock`) this instance holds, and keeps the last
//! [`TAKEOVER_BUFFER`] batches of every (worker, rank) while standing by. When it starts
//! publishing a worker (lock taken, or regained after a lapse or a failed publish), it
//! reads the last batch of each rank from the stream and publishes what it holds after
//! it, so a failover or a NATS outage shorter than the buffer leaves no gap.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::kv;
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{info, warn};

use super::feed::ResetReason;
use super::handle::SourceHandle;
use super::jetstream::JetStreamSetup;
use super::metrics::metrics;
use super::nats_envelope::{self, encode_headers, relay_subject, worker_key, RelayedBatch};
use super::relay_lock::{self, LeaseReport};

/// Batches kept per (worker, rank) for a takeover.
pub(super) const TAKEOVER_BUFFER: usize = 4096;
/// Publishes awaiting their acknowledgement at most.
const MAX_IN_FLIGHT: usize = 1024;
/// A worker without batches for this long (at least 10 lock TTLs) is forgotten: its lock
/// is released (it expires), so a removed worker does not keep the lock from relays that
/// still read it. Every relay of a worker sees the same batches, so they go idle together.
const IDLE_RELEASE: Duration = Duration::from_secs(30);

/// One worker as this relay sees it.
struct WorkerRelay {
    valid_until: Option<Instant>,
    last_batch: Instant,
    /// Caught up with the stream and publishing (while the lease is valid).
    publishing: bool,
    ranks: HashMap<u32, VecDeque<RelayedBatch>>,
    /// Per rank: the stream's last sequence when it was ahead of this relay at takeover;
    /// batches up to it are already in the stream and are not published again.
    ahead: HashMap<u32, u64>,
    _lock: SourceHandle,
}

impl WorkerRelay {
    fn lease_valid(&self) -> bool {
        self.valid_until.is_some_and(|t| Instant::now() < t)
    }
}

type Acked = (String, bool);

/// Runs until `rx` closes.
pub(crate) async fn run(
    tasks: crate::tasks::Tasks,
    setup: JetStreamSetup,
    locks: kv::Store,
    instance: String,
    mut rx: mpsc::Receiver<RelayedBatch>,
) {
    let (lease_tx, mut lease_rx) = mpsc::unbounded_channel::<LeaseReport>();
    let idle = IDLE_RELEASE.max(setup.config.lock_ttl * 10);
    let mut sweep = tokio::time::interval(setup.config.lock_ttl);
    let mut relay = Relay {
        tasks,
        setup,
        locks,
        instance,
        lease_tx,
        workers: HashMap::new(),
        acks: FuturesUnordered::new(),
        warned: false,
    };
    loop {
        tokio::select! {
            batch = rx.recv() => match batch {
                Some(batch) => relay.on_batch(batch).await,
                None => break,
            },
            Some(report) = lease_rx.recv() => relay.on_lease(report).await,
            Some((url, ok)) = relay.acks.next(), if !relay.acks.is_empty() => relay.on_ack(&url, ok),
            _ = sweep.tick() => relay.forget_idle(idle),
        }
    }
}

struct Relay {
    tasks: crate::tasks::Tasks,
    setup: JetStreamSetup,
    locks: kv::Store,
    instance: String,
    lease_tx: mpsc::UnboundedSender<LeaseReport>,
    workers: HashMap<String, WorkerRelay>,
    acks: FuturesUnordered<futures::future::BoxFuture<'static, Acked>>,
    warned: bool,
}

impl Relay {
    fn worker(&mut self, url: &str) -> &mut WorkerRelay {
        if !self.workers.contains_key(url) {
            let lock = relay_lock::spawn(
                &self.tasks,
                self.locks.clone(),
                worker_key(url),
                url.to_owned(),
                self.instance.clone(),
                self.setup.config.lock_ttl,
                self.lease_tx.clone(),
            );
            self.workers.insert(
                url.to_owned(),
                WorkerRelay {
                    valid_until: None,
                    last_batch: Instant::now(),
                    publishing: false,
                    ranks: HashMap::new(),
                    ahead: HashMap::new(),
                    _lock: lock,
                },
            );
        }
        self.workers
            .get_mut(url)
            .unwrap_or_else(|| unreachable!("inserted above"))
    }

    fn forget_idle(&mut self, idle: Duration) {
        let before = self.workers.len();
        self.workers.retain(|_, w| w.last_batch.elapsed() < idle);
        if self.workers.len() != before {
            metrics()
                .nats
                .relay_locks_held
                .set(self.workers.values().filter(|w| w.lease_valid()).count() as i64);
        }
    }

    async fn on_batch(&mut self, batch: RelayedBatch) {
        let w = self.worker(&batch.worker_url);
        w.last_batch = Instant::now();
        let buffer = w.ranks.entry(batch.rank).or_default();
        if buffer.len() == TAKEOVER_BUFFER {
            buffer.pop_front();
        }
        buffer.push_back(batch.clone());
        if w.publishing && !w.lease_valid() {
            w.publishing = false;
        }
        let published_already = match w.ahead.get(&batch.rank) {
            Some(&last) if batch.reset.is_none() && batch.seq <= last => true,
            Some(_) => {
                w.ahead.remove(&batch.rank);
                false
            }
            None => false,
        };
        if !w.publishing {
            metrics().nats.relayed.with_label_values(&["standby"]).inc();
        } else if !published_already {
            self.publish(batch).await;
        }
    }

    async fn on_lease(&mut self, report: LeaseReport) {
        let url = report.worker_url;
        let Some(w) = self.workers.get_mut(&url) else {
            return;
        };
        w.valid_until = report.valid_until;
        let start = w.lease_valid() && !w.publishing;
        if !w.lease_valid() {
            w.publishing = false;
        }
        let ranks: Vec<VecDeque<RelayedBatch>> = if start {
            w.ranks.values().cloned().collect()
        } else {
            Vec::new()
        };
        metrics()
            .nats
            .relay_locks_held
            .set(self.workers.values().filter(|w| w.lease_valid()).count() as i64);
        if !start {
            return;
        }
        match self.catch_up(&url, ranks).await {
            Ok(n) => {
                if let Some(w) = self.workers.get_mut(&url) {
                    w.publishing = true;
                }
                info!(worker = %url, republished = n, "kv events relay: publishing to JetStream");
            }
            Err(e) => {
                warn!(worker = %url, error = %e, "kv events relay: cannot catch the stream up; retrying at the next lease refresh")
            }
        }
    }

    /// Publishes, per rank, the buffered batches the stream does not have yet.
    async fn catch_up(
        &mut self,
        url: &str,
        ranks: Vec<VecDeque<RelayedBatch>>,
    ) -> anyhow::Result<usize> {
        let mut published = 0;
        for buffer in ranks {
            let Some(first) = buffer.front() else {
                continue;
            };
            let subject = relay_subject(&self.setup.config.prefix, url, first.rank);
            let last = match self
                .setup
                .stream
                .get_last_raw_message_by_subject(&subject)
                .await
            {
                Ok(m) => nats_envelope::decode(Some(&m.headers), m.payload)
                    .ok()
                    .map(|b| b.seq),
                Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => None,
                Err(e) => return Err(e.into()),
            };
            let missing = missing_after(&buffer, last);
            if let (Some(last), true) = (last, missing.is_empty()) {
                if let Some(w) = self.workers.get_mut(url) {
                    w.ahead.insert(first.rank, last);
                }
            }
            for batch in missing {
                if !self.publish(batch).await {
                    anyhow::bail!("publish failed");
                }
                published += 1;
            }
        }
        Ok(published)
    }

    /// Sends one batch (its acknowledgement is awaited in the background); false when the
    /// send itself failed.
    async fn publish(&mut self, batch: RelayedBatch) -> bool {
        while self.acks.len() >= MAX_IN_FLIGHT {
            if let Some((url, ok)) = self.acks.next().await {
                self.on_ack(&url, ok);
            }
        }
        let subject = relay_subject(&self.setup.config.prefix, &batch.worker_url, batch.rank);
        let headers = encode_headers(&batch);
        let url = batch.worker_url;
        match self
            .setup
            .context
            .publish_with_headers(subject, headers, batch.payload)
            .await
        {
            Ok(ack) => {
                self.acks.push(Box::pin(await_ack(url, ack)));
                true
            }
            Err(e) => {
                self.failed(&url, &e.to_string());
                false
            }
        }
    }

    fn on_ack(&mut self, url: &str, ok: bool) {
        if ok {
            metrics().nats.relayed.with_label_values(&["ok"]).inc();
        } else {
            self.failed(url, "no acknowledgement");
        }
    }

    /// A publish failed: stop publishing this worker until the next lease refresh, which
    /// catches up from the stream's tail (the buffer covers the hole).
    fn failed(&mut self, url: &str, error: &str) {
        metrics().nats.relayed.with_label_values(&["error"]).inc();
        if let Some(w) = self.workers.get_mut(url) {
            w.publishing = false;
        }
        if !std::mem::replace(&mut self.warned, true) {
            warn!(
                worker = url,
                error, "kv events relay: JetStream publish failed"
            );
        }
    }
}

async fn await_ack(url: String, ack: PublishAckFuture) -> Acked {
    (url, ack.await.is_ok())
}

/// The buffered batches to publish when the stream's last batch of the rank has sequence
/// `last` (None: the stream has none). Found in the buffer: the ones after it. Buffer
/// starting at `last + 1` (a relay that forgot an idle worker): all of them. Otherwise,
/// when every buffered batch is older and no reset happened since, none (the stream is
/// ahead; later batches continue it). Otherwise all of them, the first marked `gap` so
/// that consumers clear the rank rather than merge two histories.
pub(super) fn missing_after(
    buffer: &VecDeque<RelayedBatch>,
    last: Option<u64>,
) -> Vec<RelayedBatch> {
    let Some(last) = last else {
        return buffer.iter().cloned().collect();
    };
    if let Some(pos) = buffer.iter().rposition(|b| b.seq == last) {
        return buffer.iter().skip(pos + 1).cloned().collect();
    }
    if buffer
        .front()
        .is_some_and(|b| b.seq == last.wrapping_add(1))
    {
        return buffer.iter().cloned().collect();
    }
    if buffer.iter().all(|b| b.seq < last && b.reset.is_none()) {
        return Vec::new();
    }
    let mut out: Vec<RelayedBatch> = buffer.iter().cloned().collect();
    if let Some(first) = out.first_mut() {
        first.reset.get_or_insert(ResetReason::Gap);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn buf(seqs: &[u64]) -> VecDeque<RelayedBatch> {
        seqs.iter()
            .map(|&seq| RelayedBatch {
                worker_url: "http://w".into(),
                rank: 0,
                seq,
                reset: None,
                payload: Bytes::new(),
            })
            .collect()
    }

    fn seqs(out: &[RelayedBatch]) -> Vec<u64> {
        out.iter().map(|b| b.seq).collect()
    }

    #[test]
    fn publishes_what_follows_the_stream_tail() {
        let b = buf(&[4, 5, 6, 7]);
        assert_eq!(seqs(&missing_after(&b, Some(5))), vec![6, 7]);
        assert!(missing_after(&b, Some(7)).is_empty());
        assert_eq!(seqs(&missing_after(&b, None)), vec![4, 5, 6, 7]);
        let continues = missing_after(&b, Some(3));
        assert_eq!(seqs(&continues), vec![4, 5, 6, 7]);
        assert_eq!(continues[0].reset, None);
    }

    #[test]
    fn a_stream_ahead_of_the_buffer_gets_nothing() {
        assert!(missing_after(&buf(&[4, 5]), Some(9)).is_empty());
    }

    #[test]
    fn a_tail_outside_the_buffer_is_a_gap() {
        let out = missing_after(&buf(&[10, 11]), Some(3));
        assert_eq!(seqs(&out), vec![10, 11]);
        assert_eq!(out[0].reset, Some(ResetReason::Gap));
        assert_eq!(out[1].reset, None);
    }
}
