//! `ConnPool`: the data plane's keep-alive HTTP/1 connections to workers, driven by the
//! request's own task.
//!
//! hyper-util's pooled client runs every upstream connection in a task of its own: each request
//! goes to that task through a channel and its response comes back through another, so every
//! proxied request costs two extra task wake-ups (often a cross-thread futex hand-off). Here a
//! checked-out connection ([`Upstream`]) is a hyper 1 `client::conn::http1` pair that the
//! request's task polls itself while it waits for the response head ([`Upstream::send`]) and
//! while it relays the body ([`UpstreamBody`]); when the body ends, the connection goes back to
//! its worker's idle stack. Admin fan-outs keep the hyper-util client (`client.rs`).
//!
//! Idle connections are not polled: a connection the worker closed meanwhile is found on
//! checkout (polled once: EOF ends it), and a request that could not be written on a reused
//! connection is sent again on a fresh one (as hyper-util does). Idle connections older than
//! the idle timeout are dropped on checkout and by a sweep at most every few seconds, so
//! workers that left do not keep sockets open.

use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::net::TcpStream;

type Sender = http1::SendRequest<Full<Bytes>>;
type Connection = http1::Connection<TokioIo<TcpStream>, Full<Bytes>>;

/// How connections are made and kept.
#[derive(Debug, Clone, Copy)]
pub struct PoolSettings {
    pub connect_timeout: Duration,
    /// Idle connections older than this are closed.
    pub idle_timeout: Duration,
    /// Idle connections kept per worker (more are closed when their body ends).
    pub max_idle_per_host: usize,
    /// TCP keep-alive probe time of each socket.
    pub tcp_keepalive: Duration,
}

impl PoolSettings {
    /// The data plane's settings (the same as the hyper-util client's in `client.rs`).
    pub fn new(connect_timeout: Duration) -> PoolSettings {
        PoolSettings {
            connect_timeout,
            idle_timeout: Duration::from_secs(50),
            max_idle_per_host: 512,
            tcp_keepalive: Duration::from_secs(30),
        }
    }
}

/// Idle stacks of every worker this router has sent requests to (see module docs).
pub struct ConnPool {
    hosts: Mutex<HashMap<Box<str>, Arc<Host>>>,
    settings: PoolSettings,
    next_sweep: Mutex<Instant>,
}

/// One worker address (`host:port`): its idle connections and the `Host` header for it.
struct Host {
    addr: Box<str>,
    host_header: HeaderValue,
    idle: Mutex<Vec<Idle>>,
    max_idle: usize,
}

struct Idle {
    conn: Upstream,
    since: Instant,
}

/// Why no response head came back.
#[derive(Debug)]
pub enum UpstreamError {
    /// No connection (refused, unreachable, timed out, not an `http://` URL).
    Connect(String),
    /// The request was not written (the connection closed first): safe to send elsewhere.
    Unsent(hyper::Error),
    /// The request may have been written.
    Failed(hyper::Error),
}

/// A connection checked out of the pool for one request.
pub struct Upstream {
    sender: Sender,
    /// `None` once the connection future has ended (closed or failed). Boxed once per
    /// connection, so a checked-out connection is a few words to move around.
    conn: Option<Box<Connection>>,
    host: Arc<Host>,
    reused: bool,
}

impl ConnPool {
    pub fn new(settings: PoolSettings) -> ConnPool {
        ConnPool {
            hosts: Mutex::new(HashMap::new()),
            settings,
            next_sweep: Mutex::new(Instant::now()),
        }
    }

    /// Sends `req` (absolute URI `http://host:port/path`) on a pooled or new connection and
    /// returns the response head with a body that drives the connection (see module docs).
    pub async fn send(
        &self,
        mut req: Request<Full<Bytes>>,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        let host = self.host(req.uri())?;
        req.headers_mut()
            .entry(header::HOST)
            .or_insert_with(|| host.host_header.clone());
        *req.uri_mut() = origin_form(req.uri());
        let up = match self.checkout(&host).await {
            Some(up) => up,
            None => self.connect(&host).await?,
        };
        match up.send(req).await {
            Err(Retry::Again(req)) => {
                // A reused connection closed before the request went out: once more, fresh.
                let up = self.connect(&host).await?;
                up.send(*req).await.map_err(Retry::into_error)
            }
            other => other.map_err(Retry::into_error),
        }
    }

    /// The idle stack of `uri`'s authority (made on first use).
    fn host(&self, uri: &Uri) -> Result<Arc<Host>, UpstreamError> {
        if uri.scheme() != Some(&http::uri::Scheme::HTTP) {
            return Err(UpstreamError::Connect(format!(
                "unsupported URL scheme in {uri} (workers are called over http://)"
            )));
        }
        let Some(authority) = uri.authority() else {
            return Err(UpstreamError::Connect(format!("no host in {uri}")));
        };
        self.sweep();
        let mut hosts = self.hosts.lock();
        if let Some(h) = hosts.get(authority.as_str()) {
            return Ok(h.clone());
        }
        let host_header = match authority.port_u16() {
            Some(80) => HeaderValue::from_str(authority.host()),
            _ => HeaderValue::from_str(authority.as_str()),
        }
        .map_err(|e| UpstreamError::Connect(format!("invalid host {authority}: {e}")))?;
        let port = authority.port_u16().unwrap_or(80);
        let host = Arc::new(Host {
            addr: format!("{}:{port}", authority.host()).into(),
            host_header,
            idle: Mutex::new(Vec::new()),
            max_idle: self.settings.max_idle_per_host,
        });
        hosts.insert(authority.as_str().into(), host.clone());
        Ok(host)
    }

    /// The most recently used idle connection of `host` that is still open.
    async fn checkout(&self, host: &Arc<Host>) -> Option<Upstream> {
        loop {
            let idle = host.idle.lock().pop()?;
            if idle.since.elapsed() >= self.settings.idle_timeout {
                continue;
            }
            let mut up = idle.conn;
            if poll_fn(|cx| Poll::Ready(up.poll_usable(cx))).await {
                up.reused = true;
                return Some(up);
            }
        }
    }

    async fn connect(&self, host: &Arc<Host>) -> Result<Upstream, UpstreamError> {
        let connect = TcpStream::connect(&*host.addr);
        let stream = match tokio::time::timeout(self.settings.connect_timeout, connect).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(UpstreamError::Connect(format!("{}: {e}", host.addr))),
            Err(_) => {
                return Err(UpstreamError::Connect(format!(
                    "{}: connect timed out after {:?}",
                    host.addr, self.settings.connect_timeout
                )))
            }
        };
        let _ = stream.set_nodelay(true);
        let keepalive = socket2::TcpKeepalive::new().with_time(self.settings.tcp_keepalive);
        let _ = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive);
        let (sender, conn) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| UpstreamError::Connect(format!("{}: {e}", host.addr)))?;
        Ok(Upstream {
            sender,
            conn: Some(Box::new(conn)),
            host: host.clone(),
            reused: false,
        })
    }

    /// Drops idle connections past the idle timeout, and workers with none left and no
    /// connection checked out, at most once per `SWEEP_EVERY`.
    fn sweep(&self) {
        const SWEEP_EVERY: Duration = Duration::from_secs(5);
        let now = Instant::now();
        {
            let mut next = self.next_sweep.lock();
            if now < *next {
                return;
            }
            *next = now + SWEEP_EVERY;
        }
        let timeout = self.settings.idle_timeout;
        self.hosts.lock().retain(|_, h| {
            let mut idle = h.idle.lock();
            idle.retain(|i| now.saturating_duration_since(i.since) < timeout);
            !idle.is_empty() || Arc::strong_count(h) > 1
        });
    }

    /// Idle connections per worker address (tests, debugging).
    pub fn idle_count(&self, authority: &str) -> usize {
        self.hosts
            .lock()
            .get(authority)
            .map_or(0, |h| h.idle.lock().len())
    }
}

/// `send` on one connection: a request that did not go out on a reused connection comes back.
enum Retry {
    /// Boxed: the rare path carries the whole request.
    Again(Box<Request<Full<Bytes>>>),
    Error(UpstreamError),
}

impl Retry {
    fn into_error(self) -> UpstreamError {
        match self {
            Retry::Again(_) => UpstreamError::Connect("connection closed before sending".into()),
            Retry::Error(e) => e,
        }
    }
}

impl Upstream {
    /// Polls the connection once and tells whether a request can be sent on it now.
    fn poll_usable(&mut self, cx: &mut Context<'_>) -> bool {
        self.drive(cx);
        self.conn.is_some() && matches!(self.sender.poll_ready(cx), Poll::Ready(Ok(())))
    }

    /// Polls the connection future (reads and writes the socket); drops it once it ended.
    fn drive(&mut self, cx: &mut Context<'_>) {
        if let Some(c) = self.conn.as_mut() {
            if Pin::new(c.as_mut()).poll(cx).is_ready() {
                // Dropping the dispatcher fails a request still waiting on it.
                self.conn = None;
            }
        }
    }

    /// Writes `req` and waits for the response head, driving the connection meanwhile.
    async fn send(mut self, req: Request<Full<Bytes>>) -> Result<Response<UpstreamBody>, Retry> {
        let ready = poll_fn(|cx| {
            self.drive(cx);
            if self.conn.is_none() {
                return Poll::Ready(false);
            }
            self.sender.poll_ready(cx).map(|r| r.is_ok())
        })
        .await;
        if !ready {
            return self.unsent(Retry::Again(Box::new(req)));
        }
        let mut sent = std::pin::pin!(self.sender.try_send_request(req));
        let answered = poll_fn(|cx| {
            self.drive(cx);
            sent.as_mut().poll(cx)
        })
        .await;
        match answered {
            Ok(resp) => Ok(resp.map(|body| UpstreamBody {
                body,
                conn: Some(self),
            })),
            Err(mut e) => match e.take_message() {
                Some(req) => self.unsent(Retry::Again(Box::new(req))),
                None => Err(Retry::Error(classify(e.into_error()))),
            },
        }
    }

    /// A request that was not written: sent again on a fresh connection when this one was
    /// reused, else reported as unsent.
    fn unsent(&self, again: Retry) -> Result<Response<UpstreamBody>, Retry> {
        match again {
            Retry::Again(req) if self.reused => Err(Retry::Again(req)),
            Retry::Again(_) => Err(Retry::Error(UpstreamError::Connect(
                "the worker closed the connection before the request was sent".into(),
            ))),
            other => Err(other),
        }
    }

    /// Back to the idle stack (when still open and the stack has room).
    fn release(mut self) {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        self.drive(&mut cx);
        if self.conn.is_none() || self.sender.is_closed() {
            return;
        }
        let host = self.host.clone();
        let mut idle = host.idle.lock();
        if idle.len() < host.max_idle {
            idle.push(Idle {
                conn: self,
                since: Instant::now(),
            });
        }
    }
}

fn classify(e: hyper::Error) -> UpstreamError {
    if e.is_canceled() {
        UpstreamError::Unsent(e)
    } else {
        UpstreamError::Failed(e)
    }
}

/// `http://host:port/path?q` -> `/path?q` (what HTTP/1 sends to an origin server).
fn origin_form(uri: &Uri) -> Uri {
    match uri.path_and_query() {
        Some(p) if p.as_str() != "/" => {
            let mut parts = http::uri::Parts::default();
            parts.path_and_query = Some(p.clone());
            Uri::from_parts(parts).unwrap_or_default()
        }
        _ => Uri::default(),
    }
}

/// A worker's response body; polling it drives its connection, which goes back to the pool
/// when the body has ended (and is closed when the body is dropped before its end).
pub struct UpstreamBody {
    body: Incoming,
    conn: Option<Upstream>,
}

impl UpstreamBody {
    fn release(&mut self) {
        if let Some(up) = self.conn.take() {
            up.release();
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        if let Some(up) = this.conn.as_mut() {
            up.drive(cx);
        }
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => this.release(),
            Poll::Ready(Some(Err(_))) => this.conn = None,
            Poll::Ready(Some(Ok(_))) if this.body.is_end_stream() => this.release(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        if self.body.is_end_stream() {
            self.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_form_keeps_path_and_query_only() {
        let u: Uri = "http://127.0.0.1:8000/generate?x=1"
            .parse()
            .unwrap_or_default();
        assert_eq!(origin_form(&u), "/generate?x=1");
        let u: Uri = "http://127.0.0.1:8000".parse().unwrap_or_default();
        assert_eq!(origin_form(&u), "/");
    }

    #[test]
    fn only_http_urls_with_a_host_are_accepted() {
        let pool = ConnPool::new(PoolSettings::new(Duration::from_secs(1)));
        let https: Uri = "https://w:443/generate".parse().unwrap_or_default();
        assert!(matches!(pool.host(&https), Err(UpstreamError::Connect(_))));
        let default_port: Uri = "http://w/generate".parse().unwrap_or_default();
        let h = pool.host(&default_port).ok();
        assert_eq!(h.as_ref().map(|h| &*h.addr), Some("w:80"));
        assert_eq!(
            h.map(|h| h.host_header.clone()),
            Some(HeaderValue::from_static("w"))
        );
        let with_port: Uri = "http://w:8000/generate".parse().unwrap_or_default();
        let h = pool.host(&with_port).ok();
        assert_eq!(
            h.map(|h| h.host_header.clone()),
            Some(HeaderValue::from_static("w:8000"))
        );
    }
}
