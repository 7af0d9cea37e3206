//! `RefitGate`: the router-wide admission gate closed by a fleet-wide pause.
//!
//! While closed, data-plane requests wait in a bounded FIFO queue (or are refused when
//! configured); `open` releases them in arrival order. Opening and closing are cheap;
//! the open fast path is one atomic load.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;

/// Why a request was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateRefusal {
    #[error("generation is paused for a weight refit (the router refuses requests while paused)")]
    Refused,
    #[error("generation is paused for a weight refit and the hold queue is full ({0} requests)")]
    QueueFull(usize),
    #[error("generation stayed paused for longer than {0:?}")]
    TimedOut(Duration),
}

struct Closed {
    mode: String,
    queue: VecDeque<oneshot::Sender<()>>,
}

/// The gate (see module docs).
pub struct RefitGate {
    closed_flag: AtomicBool,
    closed: Mutex<Option<Closed>>,
    capacity: usize,
    refuse: bool,
}

impl RefitGate {
    /// A gate that holds at most `capacity` requests while closed, or refuses them all
    /// when `refuse` is set.
    pub fn new(capacity: usize, refuse: bool) -> RefitGate {
        RefitGate {
            closed_flag: AtomicBool::new(false),
            closed: Mutex::new(None),
            capacity,
            refuse,
        }
    }

    /// True while a pause holds the gate closed.
    pub fn is_closed(&self) -> bool {
        self.closed_flag.load(Ordering::SeqCst)
    }

    /// The pause mode that closed the gate, if closed.
    pub fn mode(&self) -> Option<String> {
        self.closed.lock().as_ref().map(|c| c.mode.clone())
    }

    /// Requests waiting for the gate to open.
    pub fn queued(&self) -> usize {
        self.closed
            .lock()
            .as_ref()
            .map_or(0, |c| c.queue.iter().filter(|s| !s.is_closed()).count())
    }

    /// Closes the gate (idempotent; a second pause only updates the mode).
    pub fn close(&self, mode: &str) {
        let mut g = self.closed.lock();
        match g.as_mut() {
            Some(c) => c.mode = mode.to_string(),
            None => {
                *g = Some(Closed {
                    mode: mode.to_string(),
                    queue: VecDeque::new(),
                })
            }
        }
        self.closed_flag.store(true, Ordering::SeqCst);
    }

    /// Opens the gate and releases the held requests in arrival order; returns how many.
    pub fn open(&self) -> usize {
        let mut g = self.closed.lock();
        self.closed_flag.store(false, Ordering::SeqCst);
        let Some(closed) = g.take() else { return 0 };
        let mut released = 0;
        for waiter in closed.queue {
            if waiter.send(()).is_ok() {
                released += 1;
            }
        }
        released
    }

    /// Waits until the gate is open (at once when it is), up to `max_wait`.
    pub async fn admit(&self, max_wait: Duration) -> Result<(), GateRefusal> {
        if !self.is_closed() {
            return Ok(());
        }
        let rx = {
            let mut g = self.closed.lock();
            let Some(closed) = g.as_mut() else {
                return Ok(());
            };
            if self.refuse {
                return Err(GateRefusal::Refused);
            }
            closed.queue.retain(|s| !s.is_closed());
            if closed.queue.len() >= self.capacity {
                return Err(GateRefusal::QueueFull(self.capacity));
            }
            let (tx, rx) = oneshot::channel();
            closed.queue.push_back(tx);
            rx
        };
        match tokio::time::timeout(max_wait, rx).await {
            Ok(_) => Ok(()),
            Err(_) => Err(GateRefusal::TimedOut(max_wait)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const LONG: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn open_gate_admits_at_once() {
        let g = RefitGate::new(2, false);
        assert!(g.admit(LONG).await.is_ok());
        assert_eq!(g.open(), 0);
    }

    #[tokio::test]
    async fn closed_gate_holds_then_releases_in_order() {
        let g = Arc::new(RefitGate::new(8, false));
        g.close("wait");
        assert_eq!(g.mode().as_deref(), Some("wait"));
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..3 {
            let (gate, order) = (g.clone(), order.clone());
            tasks.push(crate::tasks::Tasks::new().spawn("test admit", async move {
                gate.admit(LONG).await.expect("admitted");
                order.lock().push(i);
            }));
            // Make arrival order deterministic: wait until this one is queued.
            while g.queued() < i + 1 {
                tokio::task::yield_now().await;
            }
        }
        assert!(order.lock().is_empty(), "nothing passes a closed gate");
        assert_eq!(g.open(), 3);
        for t in tasks {
            t.await.expect("task");
        }
        assert_eq!(*order.lock(), vec![0, 1, 2], "released in arrival order");
        assert!(!g.is_closed());
    }

    #[tokio::test]
    async fn full_queue_and_refuse_mode_give_errors() {
        let g = Arc::new(RefitGate::new(1, false));
        g.close("abort");
        let g2 = g.clone();
        let held = crate::tasks::Tasks::new()
            .spawn_with("test admit", |_| async move { g2.admit(LONG).await });
        while g.queued() < 1 {
            tokio::task::yield_now().await;
        }
        assert_eq!(g.admit(LONG).await, Err(GateRefusal::QueueFull(1)));
        g.open();
        assert!(held.await.expect("task").is_ok());

        let r = RefitGate::new(8, true);
        r.close("wait");
        assert_eq!(r.admit(LONG).await, Err(GateRefusal::Refused));
        assert_eq!(
            r.admit(LONG).await.err(),
            Some(GateRefusal::Refused),
            "still refused"
        );
        r.open();
        assert!(r.admit(LONG).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_is_bounded_by_the_hold_deadline() {
        let g = RefitGate::new(4, false);
        g.close("wait");
        let max_hold = Duration::from_secs(1800);
        let start = tokio::time::Instant::now();
        assert_eq!(
            g.admit(max_hold).await,
            Err(GateRefusal::TimedOut(max_hold))
        );
        assert_eq!(start.elapsed(), max_hold);
        assert_eq!(g.queued(), 0, "the timed-out waiter left the queue");
    }
}
