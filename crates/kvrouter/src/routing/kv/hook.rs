//! `BookingHook`: the generic "a predict-on-route booking was just taken" callback.
//!
//! The KV policy calls it right after `KvIndex::book_from_at` succeeded, with what it booked.
//! The hook may return a [`RequestObserver`] that follows the same request (first relayed byte
//! = prefill done; an error status, or the request dropped before its first byte = the
//! booking is cancelled). It must not block: it runs on the request path. Shared predictions
//! across router replicas (`crate::sharing`) are its one implementation.

use std::time::Duration;

use http::StatusCode;
use kvrouter_index::SeqHash;

use crate::routing::observer::RequestObserver;
use crate::workers::{Rank, Worker};

/// One booking just made in the local index.
#[derive(Debug, Clone, Copy)]
pub struct BookingMade<'a> {
    pub worker: &'a Worker,
    pub rank: Rank,
    /// The request's chained sequence hashes (all predicted).
    pub seqs: &'a [SeqHash],
    /// Leading blocks already cached on the unit (not prefill in flight).
    pub cached: usize,
    pub ttl: Duration,
    /// The policy already ended the in-flight marks (non-streaming request).
    pub prefilled: bool,
}

/// Told about every predict-on-route booking (see module docs).
pub trait BookingHook: Send + Sync {
    fn booking_made(&self, made: &BookingMade<'_>) -> Option<Box<dyn RequestObserver>>;
}

/// Two observers of one request, called in order.
pub struct Both(pub Box<dyn RequestObserver>, pub Box<dyn RequestObserver>);

impl RequestObserver for Both {
    fn on_response_head(&mut self, status: StatusCode) {
        self.0.on_response_head(status);
        self.1.on_response_head(status);
    }

    fn on_data(&mut self, chunk: &[u8]) {
        self.0.on_data(chunk);
        self.1.on_data(chunk);
    }

    fn kv_outcome(&self) -> Option<crate::routing::observer::KvOutcome> {
        self.0.kv_outcome().or_else(|| self.1.kv_outcome())
    }
}

/// `first`, followed by `extra` when there is one.
pub fn chain(
    first: Box<dyn RequestObserver>,
    extra: Option<Box<dyn RequestObserver>>,
) -> Box<dyn RequestObserver> {
    match extra {
        Some(e) => Box::new(Both(first, e)),
        None => first,
    }
}
