//! The optional second listener of sgl-router's `--prometheus-host/--prometheus-port`: it
//! serves only `GET /metrics` (the same text as `/metrics` on the main port), so a scraper
//! configured for sgl-router keeps working.

use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

use super::body::RouterBody;
use crate::config::Config;

fn handle<B>(req: &Request<B>) -> Response<RouterBody> {
    if req.method() == Method::GET && req.uri().path() == "/metrics" {
        super::info::metrics()
    } else {
        super::ApiError::new(StatusCode::NOT_FOUND, "not_found", "only GET /metrics here")
            .into_response()
    }
}

/// Binds `config.prometheus` (if set) and serves `/metrics` on it in the background.
pub async fn spawn(config: &Config) -> anyhow::Result<()> {
    let Some((host, port)) = &config.prometheus else {
        return Ok(());
    };
    let addr = format!("{host}:{port}");
    let listener = TcpListener::bind(&addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot bind prometheus listener {addr}: {e}"))?;
    tracing::info!(addr = %listener.local_addr()?, "prometheus /metrics listener started");
    tokio::spawn(async move {
        let builder = auto::Builder::new(TokioExecutor::new());
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            };
            let builder = builder.clone();
            tokio::spawn(async move {
                let svc =
                    service_fn(
                        |req| async move { Ok::<_, std::convert::Infallible>(handle(&req)) },
                    );
                let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    Ok(())
}
