//! Lifetime of a running event source: dropping its [`SourceHandle`] stops it.

use tokio::task::JoinHandle;

use super::metrics::metrics;

/// Owns one source task (a ZMQ subscription or a NATS consumer); aborts it on drop.
#[must_use = "dropping the handle stops the source"]
pub struct SourceHandle {
    task: JoinHandle<()>,
}

impl SourceHandle {
    pub(crate) fn new(task: JoinHandle<()>) -> Self {
        Self { task }
    }

    /// False once the task has ended (it only ends when aborted or on a fatal error).
    pub fn is_running(&self) -> bool {
        !self.task.is_finished()
    }
}

impl Drop for SourceHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Counts a live source in `kvrouter_kv_event_sources` while it exists.
pub(crate) struct LiveSource;

impl LiveSource {
    pub(crate) fn new() -> Self {
        metrics().sources.inc();
        LiveSource
    }
}

impl Drop for LiveSource {
    fn drop(&mut self) {
        metrics().sources.dec();
    }
}
