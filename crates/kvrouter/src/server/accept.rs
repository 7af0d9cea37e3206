//! The accept loop and the connection task: every accepted socket is admitted to the
//! [`ConnTable`] (a free slot, a victim's slot, or a probe-only reserve slot) and served by
//! hyper until it ends, its first request head is overdue ([`HeadDeadline`]), the table closes
//! it to make room, or shutdown drains it.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioExecutor;
use hyper_util::rt::TokioIo;
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};

use super::admission::Admission as RequestAdmission;
use super::body::RouterBody;
use super::connections::metrics::{ConnMetrics, Reason};
use super::connections::{
    self, Admission, Admitted, BusyBody, ConnTable, CountingIo, HeadDeadline, Slot, WarnGate,
};
use super::error::ApiError;
use super::routes::{self, Route};
use super::state::AppState;
use crate::proxy::metrics::ProxyMetrics;

/// How often a tripped connection limit may be logged at warn.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// What every connection task shares.
struct Shared {
    state: Arc<AppState>,
    builder: auto::Builder<TokioExecutor>,
    admission: Option<RequestAdmission>,
    head: HeadDeadline,
}

/// Accepts until `state.shutdown` is cancelled and hands each connection to its own task
/// (watched by `graceful`, so the caller can drain them).
pub(super) async fn accept_loop(
    listener: &TcpListener,
    state: &Arc<AppState>,
    graceful: &GracefulShutdown,
) {
    let limits = &state.config.limits;
    let table = ConnTable::new(limits.max_connections);
    let shared = Arc::new(Shared {
        state: state.clone(),
        builder: connections::builder(limits),
        admission: RequestAdmission::new(limits, state.clone()),
        head: HeadDeadline::new(limits.request_head_timeout),
    });
    let warn = WarnGate::new(WARN_EVERY);
    let token = state.shutdown.clone();
    loop {
        let accepted = tokio::select! {
            biased;
            () = token.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors and similar: back off briefly instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let admitted = loop {
            let freed = table.freed();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(a) = table.admit() {
                break Some(a);
            }
            note_pressure(
                &warn,
                &table,
                "every connection is busy: new ones wait in the backlog",
            );
            tokio::select! {
                biased;
                () = token.cancelled() => break None,
                () = freed => {}
            }
        };
        let Some(admitted) = admitted else { break };
        match admitted.how {
            Admission::Free => {}
            Admission::Evicted(Reason::EvictedFresh) => note_pressure(
                &warn,
                &table,
                "closed the oldest connection that had not sent a request head to admit a new one",
            ),
            Admission::Evicted(_) => note_pressure(
                &warn,
                &table,
                "closed the longest-idle keep-alive connection to admit a new one",
            ),
            Admission::Reserve => note_pressure(
                &warn,
                &table,
                "every connection is busy: a new one is served for probes and metrics only",
            ),
        }
        let evicted = matches!(admitted.how, Admission::Evicted(_));
        let _ = stream.set_nodelay(true);
        let served = serve_connection(shared.clone(), admitted, stream, peer, graceful.watcher());
        state.tasks.spawn("connection", served);
        if evicted {
            // Under a flood of new connections, let the ones just admitted read their bytes
            // before the next victim is chosen: a connection whose head has not been read
            // yet cannot be told from one that sent nothing (table.rs `victim`).
            tokio::task::yield_now().await;
        }
    }
}

/// Counts a trip of `--max-connections` and warns, at most once per [`WARN_EVERY`].
fn note_pressure(warn: &WarnGate, table: &ConnTable, what: &'static str) {
    ProxyMetrics::limit_tripped("max_connections");
    if let Some(times) = warn.check() {
        let (open, reserve) = table.counts();
        tracing::warn!(
            max_connections = table.limit(),
            open,
            reserve,
            times_since_last_warning = times,
            "max_connections reached: {what}"
        );
    }
}

/// Serves one connection until it ends, its first head is overdue, or the table closes it.
async fn serve_connection(
    shared: Arc<Shared>,
    admitted: Admitted,
    stream: TcpStream,
    peer: std::net::SocketAddr,
    watcher: hyper_util::server::graceful::Watcher,
) {
    let conn = admitted.conn.clone();
    let svc_shared = shared.clone();
    let svc_conn = conn.clone();
    let svc = service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut()
            .insert(crate::proxy::headers::ClientAddr(peer));
        let shared = svc_shared.clone();
        let busy = svc_conn.begin();
        let reserve = svc_conn.slot() == Slot::Reserve;
        async move {
            let resp = if reserve {
                reserve_response(&shared.state, req).await
            } else {
                respond(&shared, req).await
            };
            // The connection is busy until the response body is sent or dropped.
            Ok::<_, Infallible>(resp.map(move |b| BusyBody::new(b, busy)))
        }
    });
    let served = watcher.watch(
        shared
            .builder
            .serve_connection(TokioIo::new(CountingIo::new(stream, conn.clone())), svc),
    );
    tokio::select! {
        ended = served => {
            if let Err(e) = ended {
                if !connections::count_connection_error(e.as_ref()) {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
            }
        }
        () = conn.closed().cancelled() => {
            tracing::debug!(%peer, "connection closed to make room for a new one");
        }
        () = shared.head.overdue(&conn) => {
            ConnMetrics::get().closed(Reason::RequestHeadTimeout);
            ProxyMetrics::limit_tripped("request_head_timeout");
            tracing::debug!(%peer, bytes = conn.bytes_read(), "first request head overdue: connection closed");
        }
    }
    drop(admitted);
}

/// A request on a regular connection: data-plane routes through request admission.
async fn respond(shared: &Shared, req: Request<Incoming>) -> Response<RouterBody> {
    if let Some(a) = &shared.admission {
        if let Route::Data(e) = routes::match_route(req.method(), req.uri().path()) {
            return match a.handle(e, req).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
        }
    }
    routes::handle(&shared.state, req).await
}

/// A request on a reserve connection: probes and metrics are answered, anything else gets 503;
/// either way the connection closes after it, giving the reserve slot back.
async fn reserve_response(state: &AppState, req: Request<Incoming>) -> Response<RouterBody> {
    let mut resp = match routes::match_route(req.method(), req.uri().path()) {
        Route::Health | Route::Readiness | Route::Metrics => routes::handle(state, req).await,
        _ => {
            let mut r = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "connection_limit",
                format!(
                    "every one of the router's --max-connections ({}) connections is busy; \
                     retry shortly",
                    state.config.limits.max_connections
                ),
            )
            .into_response();
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            r
        }
    };
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}
