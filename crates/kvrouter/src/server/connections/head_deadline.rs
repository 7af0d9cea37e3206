//! The deadline of a connection's first request head, apart from the keep-alive idle timeout
//! (`--header-read-timeout-secs`): `--request-head-timeout-secs` from accept, extended by one
//! second per [`MIN_RATE`] bytes received and never beyond three times the base: Apache
//! `mod_reqtimeout`'s `header=20-40,MinRate=500` form. A client sends its head within
//! milliseconds; one that has not after the deadline is closed, so slow connections give
//! their slot back within seconds instead of the two minutes an idle keep-alive may take.

use std::time::Duration;

use tokio::time::Instant;

use super::table::{Conn, Phase};

/// Bytes per second that earn a slow head one more second.
pub(super) const MIN_RATE: f64 = 500.0;

/// `--request-head-timeout-secs` and the ceiling it extends to.
#[derive(Debug, Clone, Copy)]
pub struct HeadDeadline {
    base: Duration,
}

impl HeadDeadline {
    pub fn new(base: Duration) -> HeadDeadline {
        HeadDeadline { base }
    }

    /// When `conn`'s first head is overdue, given the bytes it has sent so far.
    pub fn at(&self, conn: &Conn) -> Instant {
        let earned = Duration::from_secs_f64(conn.bytes_read() as f64 / MIN_RATE);
        conn.opened() + (self.base + earned).min(self.base * 3)
    }

    /// Completes when `conn`'s first request head is overdue; never once one has arrived.
    pub async fn overdue(self, conn: &Conn) {
        loop {
            if conn.phase() != Phase::Fresh {
                return std::future::pending().await;
            }
            let at = self.at(conn);
            if Instant::now() >= at {
                return;
            }
            tokio::time::sleep_until(at).await;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::server::connections::table::ConnTable;

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_is_overdue_at_the_base_and_bytes_extend_it_up_to_three_times() {
        let t = ConnTable::new(4);
        let d = HeadDeadline::new(Duration::from_secs(10));
        let silent = t.admit().unwrap();
        let start = Instant::now();
        d.overdue(&silent.conn).await;
        assert_eq!(Instant::now() - start, Duration::from_secs(10));

        let trickle = t.admit().unwrap();
        trickle.conn.add_read(2500); // +5 s
        let start = Instant::now();
        d.overdue(&trickle.conn).await;
        assert_eq!(Instant::now() - start, Duration::from_secs(15));

        let chatty = t.admit().unwrap();
        chatty.conn.add_read(1 << 20);
        assert_eq!(
            d.at(&chatty.conn) - chatty.conn.opened(),
            Duration::from_secs(30)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_sent_its_head_is_never_overdue() {
        let t = ConnTable::new(4);
        let c = t.admit().unwrap();
        let req = c.conn.begin();
        drop(req);
        let d = HeadDeadline::new(Duration::from_secs(1));
        let waited = tokio::time::timeout(Duration::from_secs(3600), d.overdue(&c.conn)).await;
        assert!(
            waited.is_err(),
            "an idle keep-alive is left to the idle timeout"
        );
    }
}
