//! Per-connection limits of the HTTP server: the listening socket's backlog, the hyper-util
//! connection builder (HTTP/1 header-read timeout and keep-alive, HTTP/2 stream, reset and
//! keep-alive limits, all driven by hyper-util's Tokio timer), the live-connection table that
//! makes room at `--max-connections` ([`table`]), the first request head's deadline
//! ([`head_deadline`]), and which connection errors count as a tripped limit.

mod busy_body;
mod head_deadline;
mod io;
pub mod metrics;
mod table;
mod warn_gate;

pub use busy_body::BusyBody;
pub use head_deadline::HeadDeadline;
pub use io::CountingIo;
pub use table::{Admission, Admitted, BusyGuard, Conn, ConnTable, Phase, Slot, RESERVE};
pub use warn_gate::WarnGate;

use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpSocket};

use crate::config::Limits;
use crate::proxy::metrics::ProxyMetrics;

/// Pending-accept stream resets an HTTP/2 client may cause before the connection is closed
/// with GOAWAY (the "rapid reset" defence; h2's own default is 20).
const HTTP2_MAX_PENDING_RESETS: usize = 20;
/// Largest request head accepted (HTTP/1 read buffer, HTTP/2 header list): 64 KiB.
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Connections the kernel holds completed but not yet accepted. RL clients open their whole
/// concurrency at once (1,024 connections within a second); tokio's default backlog of 1,024
/// overflowed under that burst, and an overflowed handshake is dropped and later reset (the
/// client sees `connection reset` on a request it already sent). The kernel caps this at
/// `net.core.somaxconn` (4,096 by default since Linux 5.4).
const LISTEN_BACKLOG: u32 = 65_535;

/// Binds `addr` (`host:port`, names resolved; the first address that binds wins) with
/// [`LISTEN_BACKLOG`] and `SO_REUSEADDR`, as `TcpListener::bind` would with its smaller backlog.
pub async fn bind(addr: &str) -> std::io::Result<TcpListener> {
    bind_with_backlog(addr, LISTEN_BACKLOG).await
}

/// [`bind`] with another listen backlog (the mock uses SGLang's).
pub async fn bind_with_backlog(
    addr: impl tokio::net::ToSocketAddrs,
    backlog: u32,
) -> std::io::Result<TcpListener> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        let socket = if a.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        match socket.bind(a).and_then(|()| socket.listen(backlog)) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address to bind")
    }))
}

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
