//! `IndexBooking`: the RAII handle of one predict-on-route booking.

use std::sync::Arc;

use super::pending::{PendingLayer, PredictionId};

/// A routing decision's predicted and in-flight blocks on one unit.
///
/// Call [`IndexBooking::prefill_done`] when the worker finished the prefill (first
/// response byte): in-flight marks end, the prediction stays until a real
/// `BlockStored` supersedes it or its TTL ends. Dropping the booking before
/// that means the request failed before prefill: both are dropped.
#[must_use = "dropping a booking cancels it"]
pub struct IndexBooking {
    pending: Arc<PendingLayer>,
    id: PredictionId,
    prefilled: bool,
}

impl IndexBooking {
    pub(crate) fn new(pending: Arc<PendingLayer>, id: PredictionId) -> Self {
        Self {
            pending,
            id,
            prefilled: false,
        }
    }

    pub fn id(&self) -> PredictionId {
        self.id
    }

    /// The prefill completed: the blocks are no longer in flight.
    pub fn prefill_done(&mut self) {
        if !std::mem::replace(&mut self.prefilled, true) {
            self.pending.prefill_done(self.id);
        }
    }

    /// Drops the prediction and in-flight marks now.
    pub fn cancel(mut self) {
        self.prefilled = true;
        self.pending.cancel(self.id);
    }

    /// Gives up RAII: the caller ends it with `KvIndex::prefill_done` /
    /// `KvIndex::cancel` (or lets the prediction expire).
    pub fn detach(mut self) -> PredictionId {
        self.prefilled = true;
        self.id
    }
}

impl Drop for IndexBooking {
    fn drop(&mut self) {
        if !self.prefilled {
            self.pending.cancel(self.id);
        }
    }
}
