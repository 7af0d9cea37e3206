//! One relay per worker: a lease in a NATS KV bucket (key = worker key, value = relay
//! instance id; the bucket's `max_age` is the lease TTL). The holder refreshes it every
//! third of the TTL with a compare-and-set on its revision; a standby retries `create`,
//! which succeeds only once the holder's entry expired (holder dead or cut off).
//!
//! The holder may publish only until `refresh start + TTL - TTL/4`: the entry it wrote
//! expires no earlier than TTL after the server stored it, so a standby can take over only
//! after the old holder stopped publishing (no double publication while both live).

use std::time::Duration;

use async_nats::jetstream::kv;
use bytes::Bytes;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;
use tracing::{info, warn};

use super::handle::SourceHandle;

/// A lease report: `Some(valid_until)` while held, `None` when not held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseReport {
    pub worker_url: String,
    pub valid_until: Option<Instant>,
}

/// How long after a successful write (started at `started`) the holder may publish.
pub(crate) fn lease_end(started: Instant, ttl: Duration) -> Instant {
    started + ttl - ttl / 4
}

/// A relay instance id: unique per process start (`<pid>-<nanos>`).
pub(crate) fn instance_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}-{nanos:x}", std::process::id())
}

/// Starts the lease loop of `worker_url` (key `key`) for relay `instance`; reports each
/// change (and each refresh) to `reports`. Dropping the handle stops it (the entry then
/// expires after the TTL).
pub(crate) fn spawn(
    tasks: &crate::tasks::Tasks,
    store: kv::Store,
    key: String,
    worker_url: String,
    instance: String,
    ttl: Duration,
    reports: UnboundedSender<LeaseReport>,
) -> SourceHandle {
    SourceHandle::new(tasks.spawn("relay lock", async move {
        let value = Bytes::from(instance.clone());
        let mut revision: Option<u64> = None;
        let mut tick = tokio::time::interval(ttl / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let started = Instant::now();
            let held_before = revision.is_some();
            if let Some(rev) = revision {
                revision = store.update(&key, value.clone(), rev).await.ok();
            }
            if revision.is_none() {
                revision = acquire(&store, &key, &value).await;
            }
            match (held_before, revision.is_some()) {
                (false, true) => {
                    info!(worker = %worker_url, relay = %instance, "kv events relay: lock taken, publishing this worker")
                }
                (true, false) => {
                    warn!(worker = %worker_url, relay = %instance, "kv events relay: lock lost, standing by")
                }
                _ => {}
            }
            let report = LeaseReport {
                worker_url: worker_url.clone(),
                valid_until: revision.map(|_| lease_end(started, ttl)),
            };
            if (held_before || revision.is_some()) && reports.send(report).is_err() {
                return;
            }
        }
    }))
}

/// Creates the entry, or adopts it when it already names this instance (a refresh whose
/// answer was lost, or a NATS restart); None when another relay holds it.
async fn acquire(store: &kv::Store, key: &str, value: &Bytes) -> Option<u64> {
    match store.create(key, value.clone()).await {
        Ok(rev) => Some(rev),
        Err(_) => match store.entry(key).await {
            Ok(Some(entry)) if entry.operation == kv::Operation::Put && entry.value == *value => {
                Some(entry.revision)
            }
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ends_before_the_entry_can_expire() {
        let now = Instant::now();
        let ttl = Duration::from_secs(4);
        assert_eq!(lease_end(now, ttl), now + Duration::from_secs(3));
        assert!(lease_end(now, ttl) < now + ttl);
    }

    #[test]
    fn instance_ids_differ() {
        let a = instance_id();
        std::thread::sleep(Duration::from_millis(1));
        assert_ne!(a, instance_id());
        assert!(a.starts_with(&std::process::id().to_string()));
    }
}
