//! Stand-ins for a build without the `etcd` feature: no [`Discovery`] can exist (the
//! configuration refuses `--etcd-endpoints` first, see [`NOT_BUILT`]) and `router register`
//! says what to rebuild.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::EtcdConfig;
use crate::workers::Registry;

/// What a build without etcd answers to an etcd flag or `router register`.
pub const NOT_BUILT: &str =
    "this router was built without etcd discovery: install the wheel or the \
container image, or rebuild with `cargo install --path crates/kvrouter --locked --features etcd` \
(needs protoc: `apt-get install protobuf-compiler`)";

/// No discovery runs in this build; the type has no value.
#[derive(Debug)]
pub enum Discovery {}

impl Discovery {
    /// Always None: `Config` refuses etcd endpoints in this build.
    pub fn start(
        _etcd: Option<&EtcdConfig>,
        _mode: &str,
        _registry: &Registry,
        _bound: SocketAddr,
        _shutdown: &CancellationToken,
        _tasks: &crate::tasks::Tasks,
    ) -> Option<Arc<Discovery>> {
        None
    }

    /// Unreachable: no value of this type exists.
    pub async fn routers_json(&self) -> Result<serde_json::Value, String> {
        match *self {}
    }

    /// Unreachable: no value of this type exists.
    pub async fn stopped(&self) {
        match *self {}
    }
}

/// `router register` in a build without etcd.
pub mod register {
    use std::ffi::OsString;

    /// Prints [`super::NOT_BUILT`] and returns 2 (invalid use).
    pub async fn main(_args: impl IntoIterator<Item = OsString>) -> i32 {
        eprintln!("router register: {}", super::NOT_BUILT);
        2
    }
}
