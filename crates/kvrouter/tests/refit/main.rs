//! Weight refits (the RL routes) through the router, one test binary: the full miles sequence
//! under load (`sequence`), its failure paths (`faults`), and SMG's real Python client
//! (`smg_client`).
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

#[path = "../support/mod.rs"]
mod support;

mod faults;
mod sequence;
mod smg_client;
