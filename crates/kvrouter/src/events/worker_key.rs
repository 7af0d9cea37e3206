//! How an event message names its worker ([`WorkerKey`]: a URL, or a Dynamo instance id) and
//! the [`WorkerResolver`] that maps it to this router's `WorkerId`; shared by the NATS consumer
//! (`nats_source.rs`), the Dynamo ZMQ plane (`dynamo_zmq.rs`) and their batches
//! (`dynamo_feeds.rs`).

use crate::workers::WorkerId;

/// How a NATS message names its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerKey<'a> {
    /// Worker URL (relayed SGLang batches): the same on every router replica.
    Url(&'a str),
    /// Dynamo instance id (`RouterEvent.worker_id`).
    Dynamo(u64),
}

/// Maps a message's worker identity to this router's `WorkerId` (None: unknown,
/// the message is counted and dropped). Any `Fn(WorkerKey) -> Option<WorkerId>`
/// closure is a resolver.
pub trait WorkerResolver: Send + Sync + 'static {
    fn resolve(&self, key: WorkerKey<'_>) -> Option<WorkerId>;
}

impl<F> WorkerResolver for F
where
    F: Fn(WorkerKey<'_>) -> Option<WorkerId> + Send + Sync + 'static,
{
    fn resolve(&self, key: WorkerKey<'_>) -> Option<WorkerId> {
        self(key)
    }
}
