//! Whether a ZMQ KV event source may believe what its endpoint sends. ZMQ events carry no
//! sender identity (SGLang's publisher and the `zeromq` crate speak only the NULL
//! mechanism), so a process that binds a dead worker's event port after it died would
//! otherwise write into that worker's index. A source trusts its endpoint only while the
//! worker it was started for is registered, healthy and still the same incarnation
//! (`Worker::incarnation`, bumped when a restart is detected), and after its connection was
//! re-established only once a health round has seen the same process answer again
//! (`Worker::confirmations`; a worker registered with health checks disabled cannot be
//! confirmed, so this last condition does not apply to it): what arrives before that is dropped and counted in
//! `kvrouter_kv_events_untrusted_total{reason}` (the sequence gap it leaves is then handled
//! as any gap: replay or clear).

use std::sync::{Arc, Weak};

use crate::workers::Worker;

/// Why a batch was not believed (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distrust {
    /// The worker is no longer registered.
    Removed,
    /// A restart was detected since the source started (a new source takes over).
    Incarnation,
    /// The health checker calls the worker unhealthy.
    Unhealthy,
    /// The connection was re-established and no health round has confirmed the worker since.
    Unconfirmed,
}

impl Distrust {
    pub fn label(self) -> &'static str {
        match self {
            Distrust::Removed => "removed",
            Distrust::Incarnation => "incarnation",
            Distrust::Unhealthy => "unhealthy",
            Distrust::Unconfirmed => "unconfirmed",
        }
    }
}

/// The trust of one source in its endpoint (see module docs).
#[derive(Debug, Clone)]
pub struct SourceTrust {
    worker: Weak<Worker>,
    incarnation: u64,
    /// After a reconnect: the confirmation count that must be exceeded.
    pending: Option<u64>,
}

impl SourceTrust {
    /// Trust for a source of `worker` started now: its first connection is believed while the
    /// worker is healthy and keeps its incarnation.
    pub fn new(worker: &Arc<Worker>) -> SourceTrust {
        SourceTrust {
            worker: Arc::downgrade(worker),
            incarnation: worker.incarnation(),
            pending: None,
        }
    }

    /// The connection was lost and made again (possibly to another process on the port):
    /// hold what arrives until the next confirming health round.
    pub fn reconnected(&mut self) {
        if let Some(w) = self.worker.upgrade() {
            let seen = w.confirmations();
            self.pending = Some(self.pending.map_or(seen, |p| p.max(seen)));
        }
    }

    /// Ok when a batch arriving now may be applied.
    pub fn check(&mut self) -> Result<(), Distrust> {
        let w = self.worker.upgrade().ok_or(Distrust::Removed)?;
        if w.incarnation() != self.incarnation {
            return Err(Distrust::Incarnation);
        }
        if !w.is_healthy() {
            return Err(Distrust::Unhealthy);
        }
        if let Some(seen) = self.pending {
            // A worker without health checks is never confirmed: its reconnects are believed.
            if !w.spec.disable_health_check && w.confirmations() <= seen {
                return Err(Distrust::Unconfirmed);
            }
            self.pending = None;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::{WorkerId, WorkerInfo};

    fn worker() -> Arc<Worker> {
        Arc::new(Worker::new(
            WorkerId(1),
            "http://127.0.0.1:1",
            WorkerInfo::default(),
        ))
    }

    #[test]
    fn first_connection_is_trusted_while_healthy() {
        let w = worker();
        let mut t = SourceTrust::new(&w);
        assert_eq!(t.check(), Ok(()));
        for _ in 0..10 {
            let _ = w.record_failure();
        }
        assert_eq!(t.check(), Err(Distrust::Unhealthy));
    }

    #[test]
    fn a_reconnect_waits_for_a_confirming_health_round() {
        let w = worker();
        let mut t = SourceTrust::new(&w);
        t.reconnected();
        assert_eq!(t.check(), Err(Distrust::Unconfirmed));
        assert_eq!(t.check(), Err(Distrust::Unconfirmed), "still held");
        w.confirm();
        assert_eq!(t.check(), Ok(()));
        assert_eq!(t.check(), Ok(()), "stays trusted");
    }

    #[test]
    fn a_new_incarnation_or_removal_ends_trust() {
        let w = worker();
        let mut t = SourceTrust::new(&w);
        w.bump_incarnation();
        assert_eq!(t.check(), Err(Distrust::Incarnation));
        let mut t = SourceTrust::new(&w);
        assert_eq!(t.check(), Ok(()));
        drop(w);
        assert_eq!(t.check(), Err(Distrust::Removed));
    }
}
