//! The live client connections and what each is doing, so that at `--max-connections` the
//! connection that matters least makes room for a new one instead of the new one waiting in the
//! kernel's backlog.
//!
//! A connection is [`Phase::Fresh`] from accept until its first request head is parsed,
//! [`Phase::Busy`] while requests are in flight on it and [`Phase::Idle`] between them (HTTP/1
//! keep-alive, an HTTP/2 connection with no open stream). When every regular slot is taken, a
//! new connection closes a victim: the longest-open fresh connection open for at least
//! [`FRESH_GRACE`] (a client that has not sent one complete head by then is either slow or an
//! attack: nginx's and Apache's slowloris answer), else a young one that sent part of a head
//! and stopped, else the idle one with the most idle time per request it served, else the
//! longest-open fresh one; a busy connection is never
//! closed, so a client making progress keeps its slot. When every slot is busy, up to
//! [`RESERVE`] more connections are admitted for `/health`, `/liveness`, `/readiness` and
//! `/metrics` only (a data-plane request there gets 503): probes are answered under pressure.
//! Only when those are taken too does the accept loop wait for a connection to close.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::metrics::{ConnMetrics, Reason};

/// Connections admitted beyond `--max-connections` when every regular one is busy, for the
/// probes and the metrics scrape (each needs no worker connection, so they fit in the 64
/// descriptors `max_connections = 0` leaves aside).
pub const RESERVE: usize = 8;

/// What a connection is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Accepted; no complete request head yet.
    Fresh,
    /// This many requests in flight.
    Busy(u32),
    /// No request in flight since this instant.
    Idle(Instant),
}

/// Which kind of slot a connection holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// One of `--max-connections`.
    Regular,
    /// One of [`RESERVE`]: probes and metrics only.
    Reserve,
}

/// One live connection.
pub struct Conn {
    id: u64,
    slot: Slot,
    opened: Instant,
    bytes_read: AtomicU64,
    served: AtomicU64,
    phase: Mutex<Phase>,
    close: CancellationToken,
}

impl Conn {
    pub fn slot(&self) -> Slot {
        self.slot
    }

    pub fn opened(&self) -> Instant {
        self.opened
    }

    pub fn phase(&self) -> Phase {
        *self.phase.lock()
    }

    /// Bytes received from the client so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    /// Counts `n` bytes received.
    pub fn add_read(&self, n: usize) {
        self.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Requests begun on this connection so far.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// Cancelled when the table closes this connection to make room for another.
    pub fn closed(&self) -> &CancellationToken {
        &self.close
    }

    /// A request head was parsed: busy until the guard (kept with the response body) drops.
    pub fn begin(self: &Arc<Self>) -> BusyGuard {
        self.served.fetch_add(1, Ordering::Relaxed);
        let mut p = self.phase.lock();
        *p = match *p {
            Phase::Busy(n) => Phase::Busy(n.saturating_add(1)),
            Phase::Fresh | Phase::Idle(_) => Phase::Busy(1),
        };
        BusyGuard(self.clone())
    }
}

/// Marks one request of a connection done when dropped.
pub struct BusyGuard(Arc<Conn>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        let mut p = self.0.phase.lock();
        if let Phase::Busy(n) = *p {
            *p = if n > 1 {
                Phase::Busy(n - 1)
            } else {
                Phase::Idle(Instant::now())
            };
        }
    }
}

/// How a connection got its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// A slot was free.
    Free,
    /// The table was full: a victim was closed for it.
    Evicted(Reason),
    /// Every regular slot was busy: a probe slot.
    Reserve,
}

/// Removes its connection from the table when dropped (the connection task holds it).
pub struct Admitted {
    table: Arc<ConnTable>,
    pub conn: Arc<Conn>,
    pub how: Admission,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.table.remove(&self.conn);
    }
}

#[derive(Default)]
struct Live {
    next_id: u64,
    regular: HashMap<u64, Arc<Conn>>,
    reserve: usize,
}

/// The live connections of one listener.
pub struct ConnTable {
    limit: usize,
    reserve: usize,
    live: Mutex<Live>,
    freed: Notify,
    metrics: &'static ConnMetrics,
}

impl ConnTable {
    /// A table of `limit` regular slots (at least 1) and [`RESERVE`] reserve slots.
    pub fn new(limit: usize) -> Arc<ConnTable> {
        Self::with_reserve(limit, RESERVE)
    }

    pub fn with_reserve(limit: usize, reserve: usize) -> Arc<ConnTable> {
        Arc::new(ConnTable {
            limit: limit.max(1),
            reserve,
            live: Mutex::new(Live::default()),
            freed: Notify::new(),
            metrics: ConnMetrics::get(),
        })
    }

    /// Regular slots.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Admits a connection accepted just now: a free regular slot, else the slot of a victim
    /// this closes, else a reserve slot; `None` when all are taken by busy connections and
    /// probes (wait for [`ConnTable::freed`] and try again).
    pub fn admit(self: &Arc<Self>) -> Option<Admitted> {
        let mut live = self.live.lock();
        let (slot, how) = if live.regular.len() < self.limit {
            (Slot::Regular, Admission::Free)
        } else if let Some(v) = victim(&live.regular).and_then(|id| live.regular.remove(&id)) {
            let reason = match v.phase() {
                Phase::Fresh => Reason::EvictedFresh,
                Phase::Idle(_) | Phase::Busy(_) => Reason::EvictedIdle,
            };
            self.metrics.closed(reason);
            v.close.cancel();
            (Slot::Regular, Admission::Evicted(reason))
        } else if live.reserve < self.reserve {
            live.reserve += 1;
            self.metrics.reserve_admitted.inc();
            (Slot::Reserve, Admission::Reserve)
        } else {
            return None;
        };
        live.next_id += 1;
        let conn = Arc::new(Conn {
            id: live.next_id,
            slot,
            opened: Instant::now(),
            bytes_read: AtomicU64::new(0),
            served: AtomicU64::new(0),
            phase: Mutex::new(Phase::Fresh),
            close: CancellationToken::new(),
        });
        if slot == Slot::Regular {
            live.regular.insert(conn.id, conn.clone());
        }
        self.metrics
            .open
            .set((live.regular.len() + live.reserve) as i64);
        Some(Admitted {
            table: self.clone(),
            conn,
            how,
        })
    }

    /// Completes when a slot may have been freed (create it before [`ConnTable::admit`]
    /// returns `None`, then await it, so no wake-up is missed).
    pub fn freed(&self) -> tokio::sync::futures::Notified<'_> {
        self.freed.notified()
    }

    /// (regular, reserve) connections open.
    pub fn counts(&self) -> (usize, usize) {
        let live = self.live.lock();
        (live.regular.len(), live.reserve)
    }

    fn remove(&self, conn: &Conn) {
        let mut live = self.live.lock();
        match conn.slot {
            Slot::Regular => {
                live.regular.remove(&conn.id);
            }
            Slot::Reserve => live.reserve = live.reserve.saturating_sub(1),
        }
        self.metrics
            .open
            .set((live.regular.len() + live.reserve) as i64);
        drop(live);
        self.freed.notify_waiters();
    }
}

/// How long a fresh connection is given to send its head before it ranks ahead of idle ones
/// as a victim: a client that just connected (a probe arriving in a burst of new
/// connections) is not closed for the burst's sake while an idle keep-alive can go.
pub(super) const FRESH_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Requests served beyond which a connection's idle time is not discounted further, so a
/// long-used connection left idle is still closed in the end.
const SERVED_CAP: u32 = 64;

/// The connection to close for a newcomer, in this order: the longest-open fresh one open for
/// at least [`FRESH_GRACE`]; a young fresh one that has sent part of a head and not the rest
/// (a slowloris shape), longest-open first; the idle one with the most idle time per request
/// served; last, the longest-open young fresh one that has sent nothing yet. A client that
/// just connected has usually sent nothing only because its bytes are in flight or its
/// connection task has not read them yet: under a flood of partial heads reopened as fast as
/// they close, ranking it by age alone closed a probe in the milliseconds before its head was
/// read, and ranking idle keep-alives ahead of the flood closed pooled connections as their
/// clients sent on them. Idle ones are ranked by idle time per request (up to [`SERVED_CAP`])
/// rather than by idle time alone (nginx's reusable-connection order): HTTP/1 gives a server
/// no way to close a keep-alive without racing a request the client may be sending on it, so
/// the one to close is the one least likely to be used next; a pooled client's connection,
/// used many times, was idle 80 ms between requests when a flood of one-request keep-alives
/// opened 10 ms before it, and closing it by idle time alone lost the request sent on it.
fn victim(conns: &HashMap<u64, Arc<Conn>>) -> Option<u64> {
    let now = Instant::now();
    conns
        .values()
        .filter_map(|c| match c.phase() {
            Phase::Fresh if now.saturating_duration_since(c.opened) >= FRESH_GRACE => {
                Some(((0u8, c.opened), c.id))
            }
            Phase::Fresh if c.bytes_read() > 0 => Some(((1u8, c.opened), c.id)),
            Phase::Idle(since) => Some(((2u8, idle_rank(now, since, c.served())), c.id)),
            Phase::Fresh => Some(((3u8, c.opened), c.id)),
            Phase::Busy(_) => None,
        })
        .min()
        .map(|(_, id)| id)
}

/// An idle connection's rank as an instant (earlier closes first): `now` less its idle time
/// divided by the requests it served.
fn idle_rank(now: Instant, since: Instant, served: u64) -> Instant {
    let per_request = u32::try_from(served)
        .unwrap_or(u32::MAX)
        .clamp(1, SERVED_CAP);
    now.checked_sub(now.saturating_duration_since(since) / per_request)
        .unwrap_or(since)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_newcomer_closes_the_oldest_fresh_then_the_longest_idle_never_a_busy_one() {
        let t = ConnTable::with_reserve(3, 1);
        let busy = t.admit().unwrap();
        let _req = busy.conn.begin();
        tokio::time::advance(Duration::from_secs(1)).await;
        let idle_old = t.admit().unwrap();
        drop(idle_old.conn.begin());
        tokio::time::advance(Duration::from_secs(1)).await;
        let fresh = t.admit().unwrap();
        assert_eq!(t.counts(), (3, 0));
        tokio::time::advance(FRESH_GRACE).await;

        // Full: the fresh one goes first, though the idle one is older.
        let a = t.admit().unwrap();
        assert!(fresh.conn.closed().is_cancelled());
        assert!(!idle_old.conn.closed().is_cancelled());
        let _a_req = a.conn.begin();
        // Then the idle one.
        let b = t.admit().unwrap();
        assert!(idle_old.conn.closed().is_cancelled());
        let _b_req = b.conn.begin();
        assert_eq!(b.conn.slot(), Slot::Regular);
        // Every regular slot busy: the reserve, then nothing.
        let probe = t.admit().unwrap();
        assert_eq!(probe.conn.slot(), Slot::Reserve);
        assert!(t.admit().is_none());
        assert!(!busy.conn.closed().is_cancelled());
        // A closing connection frees its slot.
        drop(probe);
        assert_eq!(t.admit().unwrap().conn.slot(), Slot::Reserve);
    }

    #[tokio::test(start_paused = true)]
    async fn a_fresh_connection_within_its_grace_outlasts_an_idle_one() {
        let t = ConnTable::with_reserve(2, 0);
        let idle = t.admit().unwrap();
        drop(idle.conn.begin());
        let probe = t.admit().unwrap();
        // A burst arrives while the probe has not sent its head yet: the idle one goes.
        let _burst = t.admit().unwrap();
        assert!(idle.conn.closed().is_cancelled());
        assert!(!probe.conn.closed().is_cancelled());
        // With no idle one left, the oldest fresh one still makes room.
        let _next = t.admit().unwrap();
        assert!(probe.conn.closed().is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn young_partial_heads_go_first_then_the_idle_then_a_silent_newcomer() {
        let t = ConnTable::with_reserve(4, 0);
        let idle = t.admit().unwrap();
        drop(idle.conn.begin());
        let silent = t.admit().unwrap();
        let partial = t.admit().unwrap();
        partial.conn.add_read(36);
        let later_partial = t.admit().unwrap();
        later_partial.conn.add_read(36);
        // Full, nothing past its grace: the partial heads go first, oldest first, though the
        // idle keep-alive and the silent one (a probe whose bytes are not read yet) are older.
        let _a = t.admit().unwrap();
        assert!(partial.conn.closed().is_cancelled());
        let _b = t.admit().unwrap();
        assert!(later_partial.conn.closed().is_cancelled());
        assert!(!idle.conn.closed().is_cancelled());
        // Then the idle one, and only then the oldest silent one.
        let _c = t.admit().unwrap();
        assert!(idle.conn.closed().is_cancelled());
        assert!(!silent.conn.closed().is_cancelled());
        let _d = t.admit().unwrap();
        assert!(silent.conn.closed().is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_used_often_outlasts_a_one_request_one_idle_for_less() {
        let t = ConnTable::with_reserve(2, 0);
        let pooled = t.admit().unwrap();
        for _ in 0..10 {
            drop(pooled.conn.begin());
        }
        tokio::time::advance(Duration::from_millis(70)).await;
        let one_shot = t.admit().unwrap();
        drop(one_shot.conn.begin());
        tokio::time::advance(Duration::from_millis(10)).await;
        // 80 ms over 10 requests against 10 ms over one: the one-shot goes.
        let a = t.admit().unwrap();
        assert!(one_shot.conn.closed().is_cancelled());
        assert!(!pooled.conn.closed().is_cancelled());
        let _a_req = a.conn.begin();
        // Idle long enough, the pooled one goes too.
        tokio::time::advance(Duration::from_secs(1)).await;
        let _b = t.admit().unwrap();
        assert!(pooled.conn.closed().is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn phases_follow_requests_in_flight() {
        let t = ConnTable::new(4);
        let c = t.admit().unwrap();
        assert_eq!(c.conn.phase(), Phase::Fresh);
        let r1 = c.conn.begin();
        let r2 = c.conn.begin();
        assert_eq!(c.conn.phase(), Phase::Busy(2));
        drop(r1);
        assert_eq!(c.conn.phase(), Phase::Busy(1));
        tokio::time::advance(Duration::from_secs(5)).await;
        drop(r2);
        assert_eq!(c.conn.phase(), Phase::Idle(Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_is_woken_when_a_connection_closes() {
        let t = ConnTable::with_reserve(1, 0);
        let c = t.admit().unwrap();
        let _req = c.conn.begin();
        let freed = t.freed();
        tokio::pin!(freed);
        freed.as_mut().enable();
        assert!(t.admit().is_none());
        drop(c);
        freed.await;
        assert!(t.admit().is_some());
    }
}
