//! Dynamo dispatch shared by both transports (NATS subjects and the ZMQ event plane): decodes
//! one message's batch of `RouterEvent`s, maps each event's Dynamo `worker_id` to this
//! router's `WorkerId` through the [`WorkerResolver`], and offers it, in order, to one
//! [`RankFeed`] per (Dynamo worker, DP rank) whose cursor starts at Dynamo's first
//! `event_id` (1). Unmapped ids are counted (`kvrouter_kv_event_unknown_worker_total`) and
//! each is logged once, for at most [`MAX_WARNED_IDS`] distinct ids.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tracing::warn;

use super::dynamo_wire::decode_router_events;
use super::feed::{Payload, RankFeed};
use super::metrics::metrics;
use super::sink::KvEventSink;
use super::worker_key::{WorkerKey, WorkerResolver};
use crate::workers::Rank;

/// Distinct unmapped Dynamo worker ids logged (later ones are only counted).
pub(crate) const MAX_WARNED_IDS: usize = 64;

/// The feeds of one Dynamo source (a NATS consumer or one ZMQ endpoint).
pub(crate) struct DynamoFeeds {
    page_size: u32,
    resolver: Arc<dyn WorkerResolver>,
    sink: Arc<dyn KvEventSink>,
    /// Only mapped workers get a feed, so this is bounded by the registered fleet's ranks.
    feeds: HashMap<(u64, Rank), RankFeed>,
    warned_ids: HashSet<u64>,
    warned_decode: bool,
}

impl DynamoFeeds {
    pub(crate) fn new(
        page_size: u32,
        resolver: Arc<dyn WorkerResolver>,
        sink: Arc<dyn KvEventSink>,
    ) -> Self {
        Self {
            page_size,
            resolver,
            sink,
            feeds: HashMap::new(),
            warned_ids: HashSet::new(),
            warned_decode: false,
        }
    }

    /// The transport reconnected: for every feed, a non-advancing `event_id` next means
    /// the publisher restarted.
    pub(crate) fn mark_reconnected(&mut self) {
        self.feeds.values_mut().for_each(RankFeed::mark_reconnected);
    }

    /// Handles one message received on `transport` (`nats`, `zmq`) from `origin` (its
    /// subject or endpoint, for the log): a message that does not decode is counted in
    /// `decode_errors{dynamo}` (one warning per source) and skipped whole.
    pub(crate) fn on_message(&mut self, transport: &'static str, origin: &str, payload: &[u8]) {
        let events = match decode_router_events(payload) {
            Ok(events) => events,
            Err(e) => {
                metrics().decode_errors.with_label_values(&["dynamo"]).inc();
                if !std::mem::replace(&mut self.warned_decode, true) {
                    warn!(origin, transport, error = %e, "kv events: undecodable Dynamo event skipped");
                }
                return;
            }
        };
        metrics().batches.with_label_values(&[transport]).inc();
        for event in &events {
            let key = (event.worker_id, event.dp_rank);
            let Some(worker) = self.resolver.resolve(WorkerKey::Dynamo(event.worker_id)) else {
                metrics().nats.unknown_worker.inc();
                self.feeds.remove(&key);
                if self.warned_ids.len() < MAX_WARNED_IDS && self.warned_ids.insert(event.worker_id)
                {
                    warn!(dynamo_worker_id = event.worker_id, origin, "kv events: Dynamo worker id maps to no registered worker (see --dynamo-worker-id, label dynamo_worker_id); its events are skipped");
                }
                continue;
            };
            let feed = self.feeds.entry(key).or_insert_with(|| {
                fresh(
                    worker,
                    event.worker_id,
                    event.dp_rank,
                    self.page_size,
                    &self.sink,
                )
            });
            if feed.worker() != worker {
                // The Dynamo id now maps to another registration: start that one afresh.
                *feed = fresh(
                    worker,
                    event.worker_id,
                    event.dp_rank,
                    self.page_size,
                    &self.sink,
                );
            }
            feed.offer(event.event_id, Payload::Dynamo(event), false);
        }
    }
}

fn fresh(
    worker: crate::workers::WorkerId,
    dynamo_id: u64,
    rank: Rank,
    page_size: u32,
    sink: &Arc<dyn KvEventSink>,
) -> RankFeed {
    let label: Arc<str> = format!("dynamo:{dynamo_id}").into();
    RankFeed::new(worker, rank, label, page_size, 1, sink.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::dynamo_wire::tests::{fixture_envelopes, NATS, RELAY};
    use crate::events::RecordingSink;
    use crate::workers::WorkerId;
    use kvrouter_index::KvEvent;

    fn feeds(sink: &Arc<RecordingSink>) -> DynamoFeeds {
        let resolver = |key: WorkerKey<'_>| match key {
            WorkerKey::Dynamo(1) => Some(WorkerId(10)),
            WorkerKey::Dynamo(3) => Some(WorkerId(30)),
            _ => None,
        };
        DynamoFeeds::new(16, Arc::new(resolver), sink.clone())
    }

    #[test]
    fn fixture_events_reach_the_mapped_worker_only() {
        let sink = RecordingSink::new();
        let mut f = feeds(&sink);
        let unknown_before = metrics().nats.unknown_worker.get();
        for bytes in fixture_envelopes(NATS) {
            f.on_message("nats", "test", &bytes);
        }
        let events = sink.events();
        assert_eq!(events.len(), 4, "worker 1's four events: {events:?}");
        assert!(events
            .iter()
            .all(|(w, rank, _)| *w == WorkerId(10) && *rank == 0));
        assert!(
            metrics().nats.unknown_worker.get() >= unknown_before + 2,
            "worker 2 unmapped"
        );
        assert!(f.warned_ids.contains(&2));
    }

    #[test]
    fn relayed_tier_is_skipped_and_the_cursor_stays_contiguous() {
        let sink = RecordingSink::new();
        let mut f = feeds(&sink);
        for bytes in fixture_envelopes(RELAY) {
            f.on_message("zmq", "test", &bytes);
        }
        let kinds: Vec<_> = sink
            .events()
            .into_iter()
            .map(|(_, _, e)| match e {
                KvEvent::StoredHashed { block_hashes, .. } => format!("stored {block_hashes:?}"),
                KvEvent::Removed { block_hashes } => format!("removed {block_hashes:?}"),
                KvEvent::Cleared => "cleared".into(),
                other => format!("{other:?}"),
            })
            .collect();
        // host_pinned H (event 3) is skipped after the cursor: no gap, no recovery clear.
        assert_eq!(
            kinds,
            vec![
                "stored [28672, 28673]",
                "stored [28674]",
                "removed [28674]",
                "cleared",
                "stored [28672, 28673]",
            ]
        );
    }

    #[test]
    fn bad_messages_are_counted_and_warned_once() {
        let sink = RecordingSink::new();
        let mut f = feeds(&sink);
        f.on_message("nats", "test", b"not an event");
        f.on_message("nats", "test", b"\xc1");
        assert!(f.warned_decode);
        assert!(sink.events().is_empty());
        for id in 100..(100 + MAX_WARNED_IDS as u64 + 10) {
            let ev =
                serde_json::json!({"worker_id": id, "event": {"event_id": 1, "data": "cleared"}});
            f.on_message("nats", "test", ev.to_string().as_bytes());
        }
        assert_eq!(f.warned_ids.len(), MAX_WARNED_IDS, "bounded");
    }
}
