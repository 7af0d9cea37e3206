//! Per-(worker, rank) sequence cursor: classifies each incoming sequence number as
//! first, contiguous, duplicate/stale, gap or restart. Pure state, no I/O.
//!
//! Restart rule (a worker restart resets its counter to `origin`): a sequence
//! behind the last that is at or below `origin` or more than `stale_window` behind,
//! or any non-advancing one right after a transport reconnect, is a restart.
//! Otherwise a sequence at or behind the last is a duplicate/stale copy (replay
//! overlap) and is skipped.

/// Verdict for one sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing seen yet on this stream (or since the last reset).
    First,
    /// Exactly `last + 1`.
    Contiguous,
    /// Equal to or behind the last accepted sequence: already applied.
    Stale,
    /// Ahead of `last + 1`: `expected` was the next one due.
    Gap { expected: u64 },
    /// The stream went backwards: the publisher restarted.
    Restart { last: u64 },
}

/// Sequence cursor of one (worker, rank) stream.
#[derive(Debug, Clone)]
pub(crate) struct SeqCursor {
    last: Option<u64>,
    origin: u64,
    stale_window: u64,
    reconnected: bool,
}

/// How far behind the last sequence a copy may be and still count as stale
/// rather than a restart (SGLang's replay buffer keeps 10,000 batches; the SUB
/// queue holds at most its high-water mark of 100,000).
pub(crate) const DEFAULT_STALE_WINDOW: u64 = 100_000;

impl SeqCursor {
    /// A cursor for a stream whose first sequence number is `origin` (SGLang 0, Dynamo 1).
    pub(crate) fn new(origin: u64) -> Self {
        Self {
            last: None,
            origin,
            stale_window: DEFAULT_STALE_WINDOW,
            reconnected: false,
        }
    }

    /// The stream's first sequence number.
    pub(crate) fn origin(&self) -> u64 {
        self.origin
    }

    /// The last accepted sequence number.
    pub(crate) fn last(&self) -> Option<u64> {
        self.last
    }

    /// Classifies `seq` without changing state.
    pub(crate) fn classify(&self, seq: u64) -> Verdict {
        let Some(last) = self.last else {
            return Verdict::First;
        };
        if seq > last {
            return match seq - last {
                1 => Verdict::Contiguous,
                _ => Verdict::Gap { expected: last + 1 },
            };
        }
        let restarted = self.reconnected
            || (seq < last && (seq <= self.origin || last - seq > self.stale_window));
        if restarted {
            Verdict::Restart { last }
        } else {
            Verdict::Stale
        }
    }

    /// Records `seq` as applied.
    pub(crate) fn accept(&mut self, seq: u64) {
        self.last = Some(seq);
        self.reconnected = false;
    }

    /// Forgets the stream position (after a restart or a reset).
    pub(crate) fn reset(&mut self) {
        self.last = None;
        self.reconnected = false;
    }

    /// The transport reconnected: the next non-advancing sequence is a restart.
    pub(crate) fn mark_reconnected(&mut self) {
        if self.last.is_some() {
            self.reconnected = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(last: u64) -> SeqCursor {
        let mut c = SeqCursor::new(0);
        c.accept(last);
        c
    }

    #[test]
    fn first_then_contiguous() {
        let mut c = SeqCursor::new(0);
        assert_eq!(c.classify(5), Verdict::First);
        c.accept(5);
        assert_eq!(c.classify(6), Verdict::Contiguous);
        c.accept(6);
        assert_eq!(c.last(), Some(6));
    }

    #[test]
    fn gap_reports_the_expected_sequence() {
        assert_eq!(live(10).classify(13), Verdict::Gap { expected: 11 });
    }

    #[test]
    fn duplicate_and_stale_are_skipped() {
        let c = live(10);
        assert_eq!(c.classify(10), Verdict::Stale);
        assert_eq!(c.classify(4), Verdict::Stale);
        assert_eq!(live(0).classify(0), Verdict::Stale);
    }

    #[test]
    fn back_to_origin_is_a_restart() {
        assert_eq!(live(10).classify(0), Verdict::Restart { last: 10 });
        let mut dynamo = SeqCursor::new(1);
        dynamo.accept(40);
        assert_eq!(dynamo.classify(1), Verdict::Restart { last: 40 });
        assert_eq!(dynamo.classify(2), Verdict::Stale);
    }

    #[test]
    fn far_backwards_is_a_restart() {
        let c = live(DEFAULT_STALE_WINDOW + 50);
        assert_eq!(
            c.classify(49),
            Verdict::Restart {
                last: DEFAULT_STALE_WINDOW + 50
            }
        );
        assert_eq!(c.classify(50), Verdict::Stale);
    }

    #[test]
    fn backwards_after_reconnect_is_a_restart_once() {
        let mut c = live(10);
        c.mark_reconnected();
        assert_eq!(c.classify(3), Verdict::Restart { last: 10 });
        assert_eq!(c.classify(10), Verdict::Restart { last: 10 });
        assert_eq!(c.classify(11), Verdict::Contiguous);
        c.accept(11);
        assert_eq!(c.classify(3), Verdict::Stale);
    }

    #[test]
    fn reset_forgets_position() {
        let mut c = live(10);
        c.reset();
        assert_eq!(c.classify(3), Verdict::First);
        let mut fresh = SeqCursor::new(0);
        fresh.mark_reconnected();
        assert_eq!(fresh.classify(0), Verdict::First);
    }
}
