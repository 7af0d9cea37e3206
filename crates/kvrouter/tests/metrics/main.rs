//! The router's `/metrics`, one test binary: the sgl-router / SMG compatible series
//! (`compat`), every family the peers' dashboards and alerts query (`compat_families`), and
//! the Grafana dashboard against what real routers export (`grafana_dashboard`).
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

#[path = "../support/mod.rs"]
mod support;

mod compat;
mod compat_families;
mod grafana_dashboard;
