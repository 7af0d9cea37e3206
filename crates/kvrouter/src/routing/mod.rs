//! Routing policies (kv, round-robin, random, least-load), the KV cost model, sticky keys and bookings.
//!
//! Per request: [`RoutingInput::parse`] reads the routing inputs from the body bytes,
//! [`Selector::select`] picks a worker among the routable candidates (sticky key first, then the
//! [`Policy`]) and returns a [`Booking`] that counts the request in flight until dropped.
//! A KV-aware policy implements [`Policy`] and is passed to [`Selector::new`].

pub(crate) mod basic;
pub(crate) mod booking;
pub(crate) mod dp_rank;
pub(crate) mod input;
pub mod kv;
pub(crate) mod metrics;
pub(crate) mod mode;
pub(crate) mod observer;
pub(crate) mod policy;
pub(crate) mod selector;
pub(crate) mod sticky;

pub use booking::Booking;
pub use input::{Endpoint, InputError, RoutingInput};
pub use mode::Mode;
pub use observer::{KvOutcome, RequestObserver};
pub use policy::{Choice, Policy};
pub use selector::{policy_for, Selector};
pub use sticky::StickyTable;

#[cfg(test)]
mod tests;
