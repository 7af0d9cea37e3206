//! `Booking`: the RAII record that a request is in flight on a worker.
//!
//! Created when a worker is chosen (before the request leaves), it counts the request in the
//! worker's in-flight load and carries the policy's [`RequestObserver`], if any. The proxy
//! moves it into the response body, so it is released when the body has been fully sent or
//! dropped (client disconnect, upstream error), exactly once.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;

use super::observer::RequestObserver;
use crate::workers::{Rank, Worker};

/// One in-flight request on one worker (released on drop).
pub struct Booking {
    worker: Arc<Worker>,
    rank: Option<Rank>,
    observer: Option<Box<dyn RequestObserver>>,
    /// The status relayed to the client, once its head was sent.
    status: Option<StatusCode>,
}

impl Booking {
    /// Books `worker`: increments its in-flight counter until the booking is dropped.
    pub fn new(
        worker: Arc<Worker>,
        rank: Option<Rank>,
        observer: Option<Box<dyn RequestObserver>>,
    ) -> Booking {
        worker.begin_request();
        Booking {
            worker,
            rank,
            observer,
            status: None,
        }
    }

    /// The booked worker.
    pub fn worker(&self) -> &Arc<Worker> {
        &self.worker
    }

    /// Tells the policy's observer the status relayed to the client.
    pub fn on_response_head(&mut self, status: StatusCode) {
        self.status = Some(status);
        if let Some(o) = self.observer.as_mut() {
            o.on_response_head(status);
        }
    }

    /// Shows the policy's observer one relayed body chunk.
    pub fn on_data(&mut self, chunk: &[u8]) {
        if let Some(o) = self.observer.as_mut() {
            o.on_data(chunk);
        }
    }

    /// The request body for the booked worker: with the chosen DP rank as `routed_dp_rank`
    /// when the worker runs several ranks and the body names none (docs/kv-routing.md);
    /// `None` = forward the original bytes.
    pub fn rank_body(&self, body: &Bytes) -> Option<Bytes> {
        match self.rank {
            Some(rank) if self.worker.info.dp_size > 1 => {
                super::dp_rank::with_routed_rank(body, rank)
            }
            _ => None,
        }
    }

    /// The status relayed to the client (`None` before the response head).
    pub fn status(&self) -> Option<StatusCode> {
        self.status
    }

    /// The KV policy's predicted and reported prefix hits for this request, in KV mode.
    pub fn kv_outcome(&self) -> Option<super::observer::KvOutcome> {
        self.observer.as_ref().and_then(|o| o.kv_outcome())
    }

    /// The DP rank chosen by the policy, if any.
    pub fn rank(&self) -> Option<Rank> {
        self.rank
    }
}

impl crate::metrics::subjects::EndedRequest for Booking {
    fn worker_url(&self) -> &str {
        &self.worker.url
    }

    fn status(&self) -> Option<StatusCode> {
        self.status
    }

    fn kv_outcome(&self) -> Option<super::observer::KvOutcome> {
        Booking::kv_outcome(self)
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
