//! The embedded KV index: which blocks are resident on which (worker, DP rank),
//! `find_matches` over a request's block hashes, and the predicted layer
//! (predict-on-route) with its TTL.

pub mod event;

pub use event::KvEvent;
