//! The publishing side: [`Publisher`] is the KV policy's [`BookingHook`]. Per booking it
//! queues a `Book` item and returns a [`Ticket`] that follows the request and queues its
//! `Prefilled` / `Cancel` follow-up. The queue is a bounded channel filled with `try_send`
//! (a full queue drops the item and counts it: the request path never waits for NATS);
//! [`run`] drains it into batched NATS messages.

use std::sync::atomic::{AtomicU64, Ordering};

use http::StatusCode;
use tokio::sync::mpsc;

use super::metrics::metrics;
use super::wire::{self, Batch, Item};
use crate::routing::kv::{BookingHook, BookingMade};
use crate::routing::observer::RequestObserver;

/// Items queued for publishing at most (then dropped and counted).
pub(crate) const QUEUE: usize = 8192;

/// The booking hook that publishes (see module docs).
pub(crate) struct Publisher {
    tx: mpsc::Sender<Item>,
    next: AtomicU64,
}

impl Publisher {
    /// A publisher and the receiving end of its queue (hand it to [`run`]).
    pub(crate) fn new(capacity: usize) -> (Publisher, mpsc::Receiver<Item>) {
        let (tx, rx) = mpsc::channel(capacity);
        let p = Publisher {
            tx,
            next: AtomicU64::new(1),
        };
        (p, rx)
    }
}

fn queue(tx: &mpsc::Sender<Item>, item: Item) {
    if tx.try_send(item).is_err() {
        metrics().dropped.with_label_values(&["queue_full"]).inc();
    }
}

impl BookingHook for Publisher {
    fn booking_made(&self, made: &BookingMade<'_>) -> Option<Box<dyn RequestObserver>> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let seqs = &made.seqs[..made.seqs.len().min(wire::MAX_SEQS)];
        let item = Item::Book {
            n,
            worker: made.worker.url.clone(),
            rank: made.rank,
            seqs: seqs.to_vec(),
            cached: u32::try_from(made.cached.min(seqs.len())).unwrap_or(u32::MAX),
            ttl_ms: u32::try_from(made.ttl.as_millis()).unwrap_or(u32::MAX),
            prefilled: made.prefilled,
        };
        queue(&self.tx, item);
        Some(Box::new(Ticket {
            tx: self.tx.clone(),
            n,
            prefilled: made.prefilled,
            first_byte: false,
            ended: false,
        }))
    }
}

/// Follows one published booking's request, like the local `KvAttachment`: the first
/// relayed byte ends the prefill, an error status or a drop before the first byte cancels.
pub(crate) struct Ticket {
    tx: mpsc::Sender<Item>,
    n: u64,
    prefilled: bool,
    first_byte: bool,
    ended: bool,
}

impl RequestObserver for Ticket {
    fn on_response_head(&mut self, status: StatusCode) {
        if !status.is_success() && !self.ended {
            self.ended = true;
            queue(&self.tx, Item::Cancel { n: self.n });
        }
    }

    fn on_data(&mut self, _chunk: &[u8]) {
        if std::mem::replace(&mut self.first_byte, true) || self.ended {
            return;
        }
        if !self.prefilled {
            queue(&self.tx, Item::Prefilled { n: self.n });
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.first_byte && !self.ended {
            queue(&self.tx, Item::Cancel { n: self.n });
        }
    }
}

/// Collects the items waiting in `rx` behind `first` into one batch (bounded by
/// [`wire::MAX_ITEMS`] and [`wire::MAX_BATCH_BYTES`]).
pub(crate) fn next_batch(instance: &str, first: Item, rx: &mut mpsc::Receiver<Item>) -> Batch {
    let mut bytes = first.size_hint();
    let mut items = vec![first];
    while items.len() < wire::MAX_ITEMS && bytes < wire::MAX_BATCH_BYTES {
        match rx.try_recv() {
            Ok(item) => {
                bytes += item.size_hint();
                items.push(item);
            }
            Err(_) => break,
        }
    }
    Batch {
        instance: instance.to_owned(),
        sent_us: wire::unix_us(),
        items,
    }
}

/// Publishes the queue until every sender is gone (one message per batch).
pub(crate) async fn run(
    client: async_nats::Client,
    instance: String,
    mut rx: mpsc::Receiver<Item>,
) {
    let m = metrics();
    while let Some(first) = rx.recv().await {
        let batch = next_batch(&instance, first, &mut rx);
        let n = batch.items.len() as u64;
        let payload = match wire::encode(&batch) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "cannot encode shared predictions");
                m.dropped.with_label_values(&["encode"]).inc_by(n);
                continue;
            }
        };
        match client.publish(wire::SUBJECT, payload.into()).await {
            Ok(()) => {
                m.published.inc_by(n);
                m.messages.with_label_values(&["out"]).inc();
            }
            Err(e) => {
                tracing::debug!(error = %e, "shared predictions not published");
                m.dropped.with_label_values(&["publish_error"]).inc_by(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::workers::{Worker, WorkerId, WorkerInfo};

    fn worker() -> Arc<Worker> {
        Arc::new(Worker::new(
            WorkerId(3),
            "http://10.0.0.3:30000",
            WorkerInfo::default(),
        ))
    }

    fn made<'a>(w: &'a Worker, seqs: &'a [u64], prefilled: bool) -> BookingMade<'a> {
        BookingMade {
            worker: w,
            rank: 0,
            seqs,
            cached: 1,
            ttl: Duration::from_secs(10),
            prefilled,
        }
    }

    fn drain(rx: &mut mpsc::Receiver<Item>) -> Vec<Item> {
        std::iter::from_fn(|| rx.try_recv().ok()).collect()
    }

    #[test]
    fn a_streamed_request_publishes_its_booking_then_its_prefill() {
        let (p, mut rx) = Publisher::new(16);
        let w = worker();
        let mut t = p.booking_made(&made(&w, &[1, 2, 3], false)).unwrap();
        t.on_response_head(StatusCode::OK);
        t.on_data(b"data: {}");
        t.on_data(b"data: {}");
        drop(t);
        let items = drain(&mut rx);
        assert_eq!(items.len(), 2, "{items:?}");
        assert!(matches!(
            &items[0],
            Item::Book { n: 1, worker, seqs, cached: 1, ttl_ms: 10_000, prefilled: false, .. }
                if worker == "http://10.0.0.3:30000" && seqs == &[1, 2, 3]
        ));
        assert_eq!(items[1], Item::Prefilled { n: 1 });
    }

    #[test]
    fn failures_cancel_and_non_streaming_needs_no_prefill_message() {
        let (p, mut rx) = Publisher::new(16);
        let w = worker();
        // Error status: one cancel, nothing more on drop.
        let mut t = p.booking_made(&made(&w, &[1], false)).unwrap();
        t.on_response_head(StatusCode::SERVICE_UNAVAILABLE);
        t.on_data(b"{}");
        drop(t);
        // Dropped before the first byte: cancel.
        drop(p.booking_made(&made(&w, &[1], true)).unwrap());
        // Non-streaming and answered: the booking only.
        let mut t = p.booking_made(&made(&w, &[1], true)).unwrap();
        t.on_data(b"{}");
        drop(t);
        let kinds: Vec<String> = drain(&mut rx)
            .iter()
            .map(|i| match i {
                Item::Book { n, .. } => format!("book{n}"),
                Item::Prefilled { n } => format!("prefilled{n}"),
                Item::Cancel { n } => format!("cancel{n}"),
            })
            .collect();
        assert_eq!(kinds, ["book1", "cancel1", "book2", "cancel2", "book3"]);
    }

    #[test]
    fn a_full_queue_drops_instead_of_waiting_and_batches_are_bounded() {
        let (p, mut rx) = Publisher::new(2);
        let w = worker();
        let long: Vec<u64> = (0..wire::MAX_SEQS as u64 + 10).collect();
        let before = metrics().dropped.with_label_values(&["queue_full"]).get();
        let tickets: Vec<_> = (0..3)
            .map(|_| p.booking_made(&made(&w, &long, true)))
            .collect();
        assert!(metrics().dropped.with_label_values(&["queue_full"]).get() > before);
        let first = rx.try_recv().unwrap();
        let batch = next_batch("me", first, &mut rx);
        assert_eq!(batch.items.len(), 2);
        assert!(matches!(&batch.items[0], Item::Book { seqs, .. } if seqs.len() == wire::MAX_SEQS));
        drop(tickets);
    }
}
