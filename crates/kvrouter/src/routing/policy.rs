//! The policy trait every routing mode implements, and the choice it returns.
//!
//! A policy sees the parsed [`RoutingInput`] and the routable candidates (healthy, not
//! draining, not already tried by this request) and picks one. It may attach a
//! [`RequestObserver`] (e.g. predicted KV blocks) that lives exactly as long as the request's
//! [`Booking`] and sees its response.
//!
//! [`Booking`]: super::Booking

use std::sync::Arc;

use super::input::RoutingInput;
use super::observer::RequestObserver;
use crate::workers::{Rank, Worker};

/// What a policy picked.
pub struct Choice {
    /// Index into the candidate slice.
    pub index: usize,
    /// DP rank inside the worker, when the policy routes per rank.
    pub rank: Option<Rank>,
    /// Policy state that watches the response, released (dropped) together with the booking.
    pub observer: Option<Box<dyn RequestObserver>>,
}

impl Choice {
    /// A plain choice of candidate `index`.
    pub fn index(index: usize) -> Choice {
        Choice {
            index,
            rank: None,
            observer: None,
        }
    }
}

/// A routing policy. Implementations must be cheap: this runs on every request.
pub trait Policy: Send + Sync {
    /// Name used in logs and metrics.
    fn name(&self) -> &'static str;
    /// Picks one of `candidates` (never empty) for `input`; `None` means "none acceptable".
    fn select(&self, input: &RoutingInput<'_>, candidates: &[Arc<Worker>]) -> Option<Choice>;

    /// A request whose sticky key maps to `candidates[preferred]`. Default: that worker, always.
    /// The KV policy overrides it: a strong preference that an overloaded worker loses.
    fn select_preferring(
        &self,
        _input: &RoutingInput<'_>,
        _candidates: &[Arc<Worker>],
        preferred: usize,
    ) -> Option<Choice> {
        Some(Choice::index(preferred))
    }

    /// Whether new sticky keys are placed by this policy (else by least-load).
    fn decides_new_keys(&self) -> bool {
        false
    }
}
