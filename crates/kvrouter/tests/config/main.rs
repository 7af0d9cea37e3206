//! Starting the `router` binary, one test binary: flags, environment and file precedence and
//! start-up failures (`precedence`), sgl-router / SMG launch flags (`compat_flags`) against
//! both peers' full flag tables (`peer_flag_table`), log levels and log lines (`log_level`,
//! `logs`), and the deployment manifests checked against the binary (`deploy_manifests`).
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

#[path = "../support/mod.rs"]
mod support;

mod compat_flags;
mod deploy_manifests;
mod log_level;
mod logs;
mod peer_flag_table;
mod precedence;
