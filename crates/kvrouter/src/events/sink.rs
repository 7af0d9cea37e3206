//! Where decoded events go: the [`KvEventSink`] trait (implemented by the index)
//! and [`RecordingSink`], an in-memory sink for tests and diagnostics.

use std::sync::Arc;
use std::time::Duration;

use kvrouter_index::{KvEvent, Placement};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::workers::{Rank, WorkerId};

/// Receives every event the event sources accept, in per-(worker, rank) order.
///
/// Calls for one (worker, rank) never overlap; calls for different ranks may come
/// from different tasks concurrently. Clearing a rank is `apply(.., KvEvent::Cleared)`.
pub trait KvEventSink: Send + Sync + 'static {
    /// Applies one event of `(worker, rank)`.
    fn apply(&self, worker: WorkerId, rank: Rank, event: KvEvent);

    /// [`KvEventSink::apply`], telling whether the rank went over its capacity cap
    /// (the sink then cleared it; the feed marks it recovering). The default never does.
    fn apply_checked(&self, worker: WorkerId, rank: Rank, event: KvEvent) -> Absorbed {
        self.apply(worker, rank, event);
        Absorbed::Ok
    }

    /// [`KvEventSink::apply_checked`] for an event of a namespace and / or a lower tier
    /// (`place`, see `index::Placement`). The default applies default placements and drops
    /// the rest (a sink that does not know namespaces must not mix them into the default one).
    fn apply_placed(
        &self,
        worker: WorkerId,
        rank: Rank,
        place: Placement,
        event: KvEvent,
    ) -> Absorbed {
        if place.is_default() {
            return self.apply_checked(worker, rank, event);
        }
        Absorbed::Ok
    }

    /// Told when a rank enters (`true`) or leaves (`false`) the recovering state:
    /// its events were lost and could not be replayed, so the rank was cleared and
    /// only blocks stored since are known (a safe under-approximation).
    fn set_recovering(&self, _worker: WorkerId, _rank: Rank, _recovering: bool) {}

    /// The most blocks `(worker, rank)` may hold (its KV capacity in router pages, plus
    /// slack; see `index::cap`). A feed folding smaller worker pages bounds the pages it
    /// holds by this times the worker pages per router block.
    fn unit_cap(&self, _worker: WorkerId, _rank: Rank) -> usize {
        kvrouter_index::DEFAULT_UNIT_CAP_BLOCKS
    }
}

impl<S: KvEventSink + ?Sized> KvEventSink for Arc<S> {
    fn apply(&self, worker: WorkerId, rank: Rank, event: KvEvent) {
        (**self).apply(worker, rank, event)
    }
    fn apply_checked(&self, worker: WorkerId, rank: Rank, event: KvEvent) -> Absorbed {
        (**self).apply_checked(worker, rank, event)
    }
    fn apply_placed(
        &self,
        worker: WorkerId,
        rank: Rank,
        place: Placement,
        event: KvEvent,
    ) -> Absorbed {
        (**self).apply_placed(worker, rank, place, event)
    }
    fn set_recovering(&self, worker: WorkerId, rank: Rank, recovering: bool) {
        (**self).set_recovering(worker, rank, recovering)
    }
    fn unit_cap(&self, worker: WorkerId, rank: Rank) -> usize {
        (**self).unit_cap(worker, rank)
    }
}

/// What [`KvEventSink::apply_checked`] did with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absorbed {
    /// Applied (or refused for a reason that needs no resync).
    Ok,
    /// The rank's entries went past `cap` (the capacity the worker advertised, plus
    /// slack): the sink cleared the rank instead of growing without bound.
    OverCap { blocks: usize, cap: usize },
}

/// One call seen by a [`RecordingSink`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Event(WorkerId, Rank, KvEvent),
    Recovering(WorkerId, Rank, bool),
}

/// Records every call; tests wait on it with [`RecordingSink::wait_until`].
#[derive(Default)]
pub struct RecordingSink {
    records: Mutex<Vec<Record>>,
    changed: Notify,
}

impl RecordingSink {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A copy of everything recorded so far.
    pub fn records(&self) -> Vec<Record> {
        self.records.lock().clone()
    }

    /// Only the events (not recovering notifications), in order.
    pub fn events(&self) -> Vec<(WorkerId, Rank, KvEvent)> {
        self.records
            .lock()
            .iter()
            .filter_map(|r| match r {
                Record::Event(w, k, e) => Some((*w, *k, e.clone())),
                Record::Recovering(..) => None,
            })
            .collect()
    }

    /// Waits until `done(records)` holds or `timeout` passes; returns whether it held.
    /// `done` sees a snapshot, so it may call back into the sink.
    pub async fn wait_until(&self, timeout: Duration, done: impl Fn(&[Record]) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            if done(&self.records()) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return done(&self.records());
            }
        }
    }

    fn push(&self, record: Record) {
        self.records.lock().push(record);
        self.changed.notify_waiters();
    }
}

impl KvEventSink for RecordingSink {
    fn apply(&self, worker: WorkerId, rank: Rank, event: KvEvent) {
        self.push(Record::Event(worker, rank, event));
    }
    fn set_recovering(&self, worker: WorkerId, rank: Rank, recovering: bool) {
        self.push(Record::Recovering(worker, rank, recovering));
    }
}
