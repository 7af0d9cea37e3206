//! The router as an HTTP proxy in front of its workers, one test binary: the data plane
//! (`data_plane`: byte-exact bodies, SSE, sticky keys, error shapes), headers both ways
//! (`headers`), bodies it does not parse (`odd_bodies`) and a worker breaking its body
//! (`broken_body`), the server's resource limits (`limits`) and client-grown state (`bounds`),
//! retries (`retries`), faults (`faults`), a frozen worker (`frozen_worker`), the circuit
//! breaker (`circuit_breaker`), graceful shutdown (`shutdown`), and `loadgen` through the
//! router (`loadgen`).
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

#[path = "../support/mod.rs"]
mod support;

mod bounds;
mod broken_body;
mod circuit_breaker;
mod data_plane;
mod faults;
mod frozen_worker;
mod headers;
mod limits;
mod loadgen;
mod odd_bodies;
mod retries;
mod shutdown;
