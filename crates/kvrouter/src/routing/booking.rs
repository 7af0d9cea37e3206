//! `Booking`: the RAII record that a request is in flight on a worker.
//!
//! Created when a worker is chosen (before the request leaves), it counts the request in the
//! worker's in-flight load and carries any policy attachment. The proxy moves it into the
//! response body, so it is released when the body has been fully sent or dropped (client
//! disconnect, upstream error), exactly once.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::workers::{Rank, Worker};

/// One in-flight request on one worker (released on drop).
pub struct Booking {
    worker: Arc<Worker>,
    rank: Option<Rank>,
    _attachment: Option<Box<dyn Any + Send + Sync>>,
}

impl Booking {
    /// Books `worker`: increments its in-flight counter until the booking is dropped.
    pub fn new(
        worker: Arc<Worker>,
        rank: Option<Rank>,
        attachment: Option<Box<dyn Any + Send + Sync>>,
    ) -> Booking {
        worker.begin_request();
        Booking {
            worker,
            rank,
            _attachment: attachment,
        }
    }

    /// The booked worker.
    pub fn worker(&self) -> &Arc<Worker> {
        &self.worker
    }

    /// The policy's attachment, if it is a `T` (e.g. the KV policy's per-request state).
    pub fn attachment_mut<T: 'static>(&mut self) -> Option<&mut T> {
        self._attachment.as_mut()?.downcast_mut::<T>()
    }

    /// The DP rank chosen by the policy, if any.
    pub fn rank(&self) -> Option<Rank> {
        self.rank
    }
}

impl Drop for Booking {
    fn drop(&mut self) {
        self.worker.end_request();
    }
}

impl fmt::Debug for Booking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Booking")
            .field("worker", &self.worker.url)
            .field("rank", &self.rank)
            .finish()
    }
}
