//! Opening an etcd client and bounding its unary calls (feature `etcd`).

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

/// Longest wait for one unary etcd call (get, put, grant, revoke); watches and keep-alive
/// streams are not bounded by it.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// Opens a client (etcd-client connects lazily and reconnects by itself; HTTP/2 keep-alive
/// notices a dead peer within a few seconds even when no call is in flight).
pub(crate) async fn connect(endpoints: &[String]) -> Result<Client, etcd_client::Error> {
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
        .with_keep_alive_while_idle(true);
    Client::connect(endpoints, Some(options)).await
}

/// Runs one unary etcd call under [`CALL_TIMEOUT`].
pub(crate) async fn timed<T>(
    call: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {CALL_TIMEOUT:?}")),
    }
}
