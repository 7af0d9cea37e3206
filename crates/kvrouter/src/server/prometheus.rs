//! The optional second listener of sgl-router's `--prometheus-host/--prometheus-port`: it
//! serves only `GET /metrics` (the same text as `/metrics` on the main port), so a scraper
//! configured for sgl-router keeps working. It runs on the router's [`Tasks`] and stops with
//! them, after the drain (`/metrics` stays scrapeable while requests finish).

use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

use super::body::RouterBody;
use crate::config::Config;
use crate::tasks::Tasks;

fn handle<B>(req: &Request<B>) -> Response<RouterBody> {
    if req.method() == Method::GET && req.uri().path() == "/metrics" {
        super::info::metrics()
    } else {
        super::ApiError::new(StatusCode::NOT_FOUND, "not_found", "only GET /metrics here")
            .into_response()
    }
}

/// Binds `config.prometheus` (if set) and serves `/metrics` on it in the background. A bind
/// failure is an error when the port was given, a warning at the default port (29000, as
/// sgl-router): several routers on one host cannot all have it, and `/metrics` on the main
/// port serves the same text.
pub(crate) async fn spawn(config: &Config, tasks: &Tasks) -> anyhow::Result<()> {
    let Some((host, port)) = &config.server.prometheus else {
        return Ok(());
    };
    let addr = format!("{host}:{port}");
    let listener = match TcpListener::bind(&addr).await {
        Ok(l) => l,
        Err(e) if !config.server.prometheus_port_given => {
            tracing::warn!(
                %addr, error = %e,
                "cannot bind the default prometheus listener; running without it (/metrics is \
                 on the main port; set --prometheus-port to another port, or 0 for none)"
            );
            return Ok(());
        }
        Err(e) => {
            return Err(anyhow::anyhow!(
                "cannot bind prometheus listener {addr}: {e}"
            ))
        }
    };
    tracing::info!(addr = %listener.local_addr()?, "prometheus /metrics listener started");
    let spawner = tasks.clone();
    tasks.spawn("prometheus listener", async move {
        let builder = auto::Builder::new(TokioExecutor::new());
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            };
            let builder = builder.clone();
            spawner.spawn("prometheus connection", async move {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_busy_default_port_is_a_warning_and_a_given_one_an_error() {
        let busy = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = busy.local_addr().expect("addr").port();
        let mut config = Config::default();
        config.server.prometheus = Some(("127.0.0.1".into(), port));
        config.server.prometheus_port_given = false;
        assert!(
            spawn(&config, &Tasks::new()).await.is_ok(),
            "default port busy: run without it"
        );
        config.server.prometheus_port_given = true;
        let err = spawn(&config, &Tasks::new())
            .await
            .expect_err("given port busy");
        assert!(err.to_string().contains("prometheus"), "{err}");
    }
}
