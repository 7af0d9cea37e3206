//! etcd discovery (`--etcd-endpoints`): workers registered under a key prefix with a lease,
//! and every router watching that prefix. See docs/discovery.md for the key layout.
//!
//! - `settings`: the validated options and the etcd client;
//! - `keys` / `record`: the key layout and the JSON values under them;
//! - `lease`: one key held under a renewed lease (worker keys and router keys);
//! - `fleet`: worker keys -> registry calls (add, drain + remove), manual workers untouched;
//! - `watch`: the router's watch loop (resync, revision resume, reconnect);
//! - `routers`: the replica keys and `GET /routers`;
//! - `register`: the `router register` subcommand that runs beside a worker.
//!
//! etcd needs the `etcd` cargo feature (etcd-client builds its gRPC code with `protoc`); without
//! it `settings` still validates the flags and refuses `--etcd-endpoints` with what to do, and
//! `absent` stands in for `service` and `register`.
//!
//! [`Discovery::start`] is what the server calls once it is bound: it watches the worker
//! keys into the registry and registers this router under `<prefix>/routers/`.

#[cfg(not(feature = "etcd"))]
mod absent;
#[cfg(feature = "etcd")]
pub(crate) mod client;
#[cfg(feature = "etcd")]
pub(crate) mod fleet;
// Without `etcd` only the tests call the key and settings helpers.
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub(crate) mod keys;
#[cfg(feature = "etcd")]
pub(crate) mod lease;
pub(crate) mod record;
#[cfg(feature = "etcd")]
pub mod register;
#[cfg(feature = "etcd")]
pub(crate) mod routers;
#[cfg(feature = "etcd")]
mod service;
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub(crate) mod settings;
#[cfg(feature = "etcd")]
pub(crate) mod watch;

#[cfg(not(feature = "etcd"))]
pub use absent::{register, Discovery, NOT_BUILT};
pub use record::{RouterRecord, WorkerRecord};
#[cfg(feature = "etcd")]
pub use service::Discovery;
pub use settings::EtcdConfig;
