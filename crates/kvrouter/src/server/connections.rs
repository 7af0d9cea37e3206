//! Per-connection limits of the HTTP server: the hyper-util connection builder (HTTP/1
//! header-read timeout and keep-alive, HTTP/2 stream, reset and keep-alive limits, all driven
//! by hyper-util's Tokio timer), the `--max-connections` slots the accept loop waits on, and
//! which connection errors count as a tripped limit.

use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::Limits;
use crate::proxy::metrics::ProxyMetrics;

/// Pending-accept stream resets an HTTP/2 client may cause before the connection is closed
/// with GOAWAY (the "rapid reset" defence; h2's own default is 20).
const HTTP2_MAX_PENDING_RESETS: usize = 20;
/// Largest request head accepted (HTTP/1 read buffer, HTTP/2 header list): 64 KiB.
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// The connection builder every accepted socket is served with (HTTP/1.1 and h2c).
pub fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true)
        .max_buf_size(MAX_HEADER_BYTES);
    b.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_concurrent_streams)
        .max_pending_accept_reset_streams(HTTP2_MAX_PENDING_RESETS)
        .max_header_list_size(MAX_HEADER_BYTES as u32)
        .keep_alive_interval(limits.http2_keep_alive_interval)
        .keep_alive_timeout(
            limits
                .http2_keep_alive_interval
                .unwrap_or(std::time::Duration::from_secs(20)),
        );
    b
}

/// `--max-connections` slots: the accept loop takes one before accepting, and the connection
/// task holds it until the connection closes.
#[derive(Clone)]
pub struct ConnectionSlots(Arc<Semaphore>);

impl ConnectionSlots {
    pub fn new(limits: &Limits) -> ConnectionSlots {
        ConnectionSlots(Arc::new(Semaphore::new(
            limits.max_connections.min(Semaphore::MAX_PERMITS),
        )))
    }

    /// A slot, at once or when a connection closes (counted as a trip when it has to wait).
    pub async fn acquire(&self) -> OwnedSemaphorePermit {
        if let Ok(p) = self.0.clone().try_acquire_owned() {
            return p;
        }
        ProxyMetrics::limit_tripped("max_connections");
        tracing::debug!("max_connections reached: new connections wait in the backlog");
        #[allow(clippy::expect_used)]
        self.0
            .clone()
            .acquire_owned()
            .await
            .expect("connection slots are never closed")
    }
}

/// Counts a connection that ended because a limit closed it; true when one did.
pub fn count_connection_error(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(he) = s.downcast_ref::<hyper::Error>() {
            if he.is_timeout() {
                ProxyMetrics::limit_tripped("header_read_timeout");
                return true;
            }
            return false;
        }
        src = s.source();
    }
    false
}
