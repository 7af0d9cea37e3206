//! The applying side: other replicas' bookings go into the local index with its own API
//! (`KvIndex::book_from_at` then `IndexBooking::detach`, so the prediction lives until its
//! TTL), follow-ups end them (`KvIndex::prefill_done` / `KvIndex::cancel`). Our own
//! messages (same instance id) and unknown workers are skipped and counted.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kvrouter_index::KvIndex;
use parking_lot::Mutex;
use tokio::time::Instant;
use xxhash_rust::xxh3::xxh3_64;

use super::metrics::metrics;
use super::pending::Pending;
use super::wire::{self, Batch, DecodeError, Item};
use crate::workers::WorkerId;

/// Other replicas' bookings remembered for their follow-up at most.
pub(crate) const PENDING: usize = 65_536;

/// Maps a worker URL (the same on every replica) to this router's id.
pub(crate) type Resolve = Box<dyn Fn(&str) -> Option<WorkerId> + Send + Sync>;

/// Applies received messages to one index (see module docs).
pub(crate) struct Applier {
    index: Arc<KvIndex>,
    own: String,
    resolve: Resolve,
    pending: Mutex<Pending>,
}

impl Applier {
    pub(crate) fn new(index: Arc<KvIndex>, own: String, resolve: Resolve, cap: usize) -> Applier {
        Applier {
            index,
            own,
            resolve,
            pending: Mutex::new(Pending::new(cap)),
        }
    }

    /// Decodes and applies one NATS payload at `now`.
    pub(crate) fn apply_payload(&self, payload: &[u8], now: Instant) {
        let m = metrics();
        match wire::decode(payload) {
            Ok(batch) => self.apply(&batch, now),
            Err(DecodeError::Malformed) => m.dropped.with_label_values(&["decode"]).inc(),
            Err(DecodeError::TooLarge) => m.dropped.with_label_values(&["too_large"]).inc(),
        }
    }

    /// Applies one decoded batch at `now`.
    pub(crate) fn apply(&self, batch: &Batch, now: Instant) {
        let m = metrics();
        if batch.instance == self.own {
            m.messages.with_label_values(&["own"]).inc();
            return;
        }
        m.messages.with_label_values(&["in"]).inc();
        let lag_us = wire::unix_us().saturating_sub(batch.sent_us);
        m.lag_seconds.observe(lag_us as f64 / 1e6);
        let origin = xxh3_64(batch.instance.as_bytes());
        let mut pending = self.pending.lock();
        for item in &batch.items {
            match item {
                Item::Book {
                    n,
                    worker,
                    rank,
                    seqs,
                    cached,
                    ttl_ms,
                    prefilled,
                } => {
                    let Some(id) = (self.resolve)(worker) else {
                        m.dropped.with_label_values(&["unknown_worker"]).inc();
                        continue;
                    };
                    let ttl = Duration::from_millis(u64::from(*ttl_ms));
                    let booked = self.index.book_from_at(
                        id,
                        *rank,
                        seqs,
                        *cached as usize,
                        ttl,
                        now.into_std(),
                    );
                    let Ok(mut booking) = booked else {
                        m.dropped.with_label_values(&["index"]).inc();
                        continue;
                    };
                    if *prefilled {
                        booking.prefill_done();
                    }
                    let pid = booking.detach();
                    let evicted = pending.insert((origin, *n), pid, now + ttl, now);
                    m.dropped
                        .with_label_values(&["pending_full"])
                        .inc_by(evicted);
                    m.applied.with_label_values(&["book"]).inc();
                }
                Item::Prefilled { n } => match pending.take((origin, *n)) {
                    Some(pid) => {
                        self.index.prefill_done(pid);
                        m.applied.with_label_values(&["prefilled"]).inc();
                    }
                    None => m.dropped.with_label_values(&["unknown_id"]).inc(),
                },
                Item::Cancel { n } => match pending.take((origin, *n)) {
                    Some(pid) => {
                        self.index.cancel(pid);
                        m.applied.with_label_values(&["cancel"]).inc();
                    }
                    None => m.dropped.with_label_values(&["unknown_id"]).inc(),
                },
            }
        }
        m.pending.set(pending.len() as i64);
    }
}

/// Applies every message of `sub` until it ends, timing the work.
pub(crate) async fn run(applier: Arc<Applier>, mut sub: async_nats::Subscriber) {
    let m = metrics();
    while let Some(msg) = sub.next().await {
        let t0 = Instant::now();
        applier.apply_payload(&msg.payload, t0);
        m.apply_seconds.inc_by(t0.elapsed().as_secs_f64());
    }
    m.subscribed.set(0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvrouter_index::seq_hashes;

    const PAGE: u32 = 4;

    fn applier(index: &Arc<KvIndex>, cap: usize) -> Applier {
        let resolve: Resolve = Box::new(|url: &str| (url == "http://w1:1").then_some(WorkerId(1)));
        Applier::new(index.clone(), "me".into(), resolve, cap)
    }

    fn book(n: u64, worker: &str, seqs: &[u64], prefilled: bool) -> Item {
        Item::Book {
            n,
            worker: worker.into(),
            rank: 0,
            seqs: seqs.to_vec(),
            cached: 0,
            ttl_ms: 10_000,
            prefilled,
        }
    }

    /// Predicted leading blocks on worker 1 rank 0 at `now`.
    fn predicted(index: &KvIndex, seqs: &[u64], now: Instant) -> u32 {
        let o = index.find_matches_at(seqs, now.into_std());
        o.units.first().map_or(0, |u| u.predicted)
    }

    fn batch(instance: &str, items: Vec<Item>) -> Batch {
        Batch {
            instance: instance.into(),
            sent_us: wire::unix_us(),
            items,
        }
    }

    #[test]
    fn another_replicas_booking_is_predicted_until_cancelled() {
        let index = Arc::new(KvIndex::new(PAGE));
        let a = applier(&index, 16);
        let seqs = seq_hashes(&(0..16).collect::<Vec<u32>>(), PAGE as usize);
        let now = Instant::now();
        a.apply(
            &batch("other", vec![book(1, "http://w1:1", &seqs, false)]),
            now,
        );
        let o = index.find_matches_at(&seqs, now.into_std()).units[0];
        assert_eq!((o.predicted, o.inflight), (4, 4));
        a.apply(&batch("other", vec![Item::Prefilled { n: 1 }]), now);
        let o = index.find_matches_at(&seqs, now.into_std()).units[0];
        assert_eq!((o.predicted, o.inflight), (4, 0));
        // The prediction outlives the follow-up until its TTL.
        assert_eq!(predicted(&index, &seqs, now + Duration::from_secs(11)), 0);
        // A second booking (other prompt), cancelled: gone at once; a follow-up of a
        // booking already ended changes nothing.
        let other = seq_hashes(&(100..116).collect::<Vec<u32>>(), PAGE as usize);
        a.apply(
            &batch("other", vec![book(2, "http://w1:1", &other, true)]),
            now,
        );
        a.apply(&batch("other", vec![Item::Cancel { n: 1 }]), now);
        assert_eq!(predicted(&index, &other, now), 4);
        assert_eq!(predicted(&index, &seqs, now), 4);
        a.apply(&batch("other", vec![Item::Cancel { n: 2 }]), now);
        assert_eq!(predicted(&index, &other, now), 0);
        assert_eq!(predicted(&index, &seqs, now), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_shared_booking_lives_until_its_ttl_on_the_runtime_clock() {
        use tokio::time::advance;
        let index = Arc::new(KvIndex::new(PAGE));
        let a = applier(&index, 16);
        // The index counts time from its creation on the std clock: start past it.
        advance(Duration::from_secs(10)).await;
        let seqs = seq_hashes(&(0..16).collect::<Vec<u32>>(), PAGE as usize);
        let other = |n: u32| {
            seq_hashes(
                &(n * 100..n * 100 + 16).collect::<Vec<u32>>(),
                PAGE as usize,
            )
        };
        // Booked (TTL 10 s, prefilled): predicted until the TTL ...
        a.apply(
            &batch("other", vec![book(1, "http://w1:1", &seqs, true)]),
            Instant::now(),
        );
        advance(Duration::from_millis(9_990)).await;
        assert_eq!(predicted(&index, &seqs, Instant::now()), 4);
        a.apply(
            &batch("other", vec![book(2, "http://w1:1", &other(2), true)]),
            Instant::now(),
        );
        assert_eq!(a.pending.lock().len(), 2);
        // ... and not after; its follow-up entry leaves with it (at the next booking).
        advance(Duration::from_millis(20)).await;
        assert_eq!(predicted(&index, &seqs, Instant::now()), 0);
        a.apply(
            &batch("other", vec![book(3, "http://w1:1", &other(3), true)]),
            Instant::now(),
        );
        let origin = xxh3_64(b"other");
        let mut pending = a.pending.lock();
        assert_eq!(pending.take((origin, 1)), None);
        assert!(pending.take((origin, 2)).is_some());
    }

    #[test]
    fn own_messages_unknown_workers_and_garbage_are_skipped() {
        let index = Arc::new(KvIndex::new(PAGE));
        let a = applier(&index, 16);
        let seqs = seq_hashes(&(0..8).collect::<Vec<u32>>(), PAGE as usize);
        let now = Instant::now();
        let own = metrics().messages.with_label_values(&["own"]).get();
        a.apply(&batch("me", vec![book(1, "http://w1:1", &seqs, true)]), now);
        assert_eq!(
            metrics().messages.with_label_values(&["own"]).get(),
            own + 1
        );
        a.apply(
            &batch("other", vec![book(1, "http://w9:9", &seqs, true)]),
            now,
        );
        a.apply_payload(b"not msgpack", now);
        assert_eq!(predicted(&index, &seqs, now), 0);
        // Same booking number from two instances: two bookings.
        a.apply(&batch("x", vec![book(7, "http://w1:1", &seqs, true)]), now);
        a.apply(&batch("y", vec![book(7, "http://w1:1", &seqs, true)]), now);
        a.apply(&batch("x", vec![Item::Cancel { n: 7 }]), now);
        assert_eq!(predicted(&index, &seqs, now), 2);
    }
}
