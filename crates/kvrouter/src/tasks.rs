//! `Tasks`: the one tracker every background task of the router is spawned through (clippy
//! disallows `tokio::spawn` elsewhere in the crate, see `crates/kvrouter/clippy.toml`).
//!
//! Two kinds of task:
//! - [`Tasks::spawn`]: a loop or a wait with nothing to finish (a timer, a health checker, an
//!   event source, a connection after the drain): shutdown drops it at its next `.await`;
//! - [`Tasks::spawn_with`]: a task that ends itself (it gets the stop token and decides what
//!   to finish first); shutdown waits for it.
//!
//! [`Tasks::shutdown`] cancels the token, closes the tracker and waits up to a grace for
//! every task to end; the names of those still running then are logged and returned. The
//! server's drain (`server::shutdown`) calls it once the requests in flight are done.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The router's task tracker (cheap to clone; clones share the tasks and the token).
#[derive(Clone, Default)]
pub struct Tasks {
    tracker: TaskTracker,
    token: CancellationToken,
    running: Arc<Mutex<BTreeMap<&'static str, usize>>>,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks")
            .field("running", &self.tracker.len())
            .field("stopping", &self.token.is_cancelled())
            .finish()
    }
}

impl Tasks {
    /// A tracker with no task and an uncancelled token.
    pub fn new() -> Tasks {
        Tasks::default()
    }

    /// Runs `fut` as task `name` until it ends or shutdown starts (then it is dropped).
    pub fn spawn<F>(&self, name: &'static str, fut: F) -> JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let token = self.token.clone();
        self.spawn_with(name, move |_| async move {
            tokio::select! {
                () = token.cancelled() => {}
                () = fut => {}
            }
        })
    }

    /// Runs the future `make` builds from the stop token as task `name`; the task ends
    /// itself (shutdown waits for it, up to its grace).
    pub fn spawn_with<F, T>(
        &self,
        name: &'static str,
        make: impl FnOnce(CancellationToken) -> F,
    ) -> JoinHandle<T>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let named = Named::new(name, self.running.clone());
        let fut = make(self.token.child_token());
        #[allow(clippy::disallowed_methods)] // the one place tasks are spawned
        tokio::spawn(self.tracker.track_future(async move {
            let _named = named;
            fut.await
        }))
    }

    /// A token cancelled when shutdown starts (cancelling it stops nothing else).
    pub fn token(&self) -> CancellationToken {
        self.token.child_token()
    }

    /// Number of tasks not yet ended.
    pub fn len(&self) -> usize {
        self.tracker.len()
    }

    /// True when no task is running.
    pub fn is_empty(&self) -> bool {
        self.tracker.is_empty()
    }

    /// Stops every task: cancels the token, closes the tracker (later spawns still run and
    /// are stopped at once) and waits up to `grace`. Returns the names (with counts) of the
    /// tasks still running then, also logged; empty when all ended.
    pub async fn shutdown(&self, grace: Duration) -> Vec<(&'static str, usize)> {
        self.token.cancel();
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_ok()
        {
            tracing::debug!("every background task stopped");
            return Vec::new();
        }
        let left: Vec<_> = self.running.lock().iter().map(|(n, c)| (*n, *c)).collect();
        tracing::warn!(
            grace_ms = grace.as_millis() as u64,
            tasks = ?left,
            "background tasks still running after the shutdown grace"
        );
        left
    }
}

/// Counts a running task under its name while it exists.
struct Named {
    name: &'static str,
    running: Arc<Mutex<BTreeMap<&'static str, usize>>>,
}

impl Named {
    fn new(name: &'static str, running: Arc<Mutex<BTreeMap<&'static str, usize>>>) -> Named {
        *running.lock().entry(name).or_default() += 1;
        Named { name, running }
    }
}

impl Drop for Named {
    fn drop(&mut self) {
        let mut running = self.running.lock();
        if let Some(n) = running.get_mut(self.name) {
            *n -= 1;
            if *n == 0 {
                running.remove(self.name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn stopped_tasks_are_awaited_and_a_stubborn_one_is_named() {
        let tasks = Tasks::new();
        tasks.spawn("ticker", async {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        let finished = Arc::new(Mutex::new(false));
        let flag = finished.clone();
        let polite = tasks.spawn_with("polite", move |token| async move {
            token.cancelled().await;
            tokio::time::sleep(Duration::from_secs(2)).await;
            *flag.lock() = true;
        });
        let stubborn = tasks.spawn_with("stubborn", |_token| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        });
        assert_eq!(tasks.len(), 3);
        let started = tokio::time::Instant::now();
        let left = tasks.shutdown(Duration::from_secs(10)).await;
        assert_eq!(left, vec![("stubborn", 1)]);
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(10),
            "waited the grace"
        );
        assert!(*finished.lock(), "the polite task finished its work");
        assert!(polite.is_finished());
        assert!(!stubborn.is_finished());
        stubborn.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_returns_when_every_task_ended() {
        let tasks = Tasks::new();
        for _ in 0..3 {
            tasks.spawn("loop", std::future::pending());
        }
        let started = tokio::time::Instant::now();
        assert!(tasks.shutdown(Duration::from_secs(30)).await.is_empty());
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(tasks.is_empty());
        let late = tasks.spawn("late", std::future::pending());
        assert!(late.await.is_ok(), "spawned after shutdown: stops at once");
    }
}
