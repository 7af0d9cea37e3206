//! Admin fan-outs over every registered worker: `/get_loads`, `/engine_metrics`
//! (`/flush_cache` is a refit fan-out: `refit_routes`).

use std::time::Duration;

use bytes::Bytes;
use futures::future::join_all;
use http::{Method, Response, StatusCode};
use serde_json::{json, Value};

use super::body::{json, with_type, RouterBody};
use super::engine_metrics;
use super::state::AppState;
use crate::proxy::fanout;
use crate::workers::load::parse_load;
use crate::workers::Snapshot;

const FANOUT_TIMEOUT: Duration = Duration::from_secs(5);

/// Every registered worker's reply to `GET path` (5 s each, concurrently), beside the snapshot
/// it was sent to.
async fn get_all(state: &AppState, path: &str) -> (Snapshot, Vec<FanoutReply>) {
    let snapshot = state.registry.snapshot();
    let calls = snapshot.iter().map(|w| {
        fanout::call(
            &state.client,
            Method::GET,
            w.as_ref().into(),
            path,
            Bytes::new(),
            FANOUT_TIMEOUT,
        )
    });
    let results = join_all(calls).await;
    (snapshot, results)
}

type FanoutReply = Result<(StatusCode, http::HeaderMap, Bytes), String>;

/// One worker's load answer: its remembered route (`/v1/loads` first), the other on a 404.
async fn get_load_of(state: &AppState, w: &crate::workers::Worker) -> FanoutReply {
    let get = |path: &'static str| {
        fanout::call(
            &state.client,
            Method::GET,
            w.into(),
            path,
            Bytes::new(),
            FANOUT_TIMEOUT,
        )
    };
    let first = w.load_route.path();
    match get(first).await {
        Ok((StatusCode::NOT_FOUND, _, _)) => get(w.load_route.missing(first)).await,
        other => other,
    }
}

/// `GET /get_loads`: `{"loads":[{"worker","worker_type","load"}],"total_workers","successful","failed"}`,
/// each worker asked on `/v1/loads` (SGLang 0.5.23) or `/get_load` (older), see `workers::load`.
pub(crate) async fn get_loads(state: &AppState) -> Response<RouterBody> {
    let snapshot = state.registry.snapshot();
    let results = join_all(snapshot.iter().map(|w| get_load_of(state, w))).await;
    let mut loads = Vec::new();
    let (mut ok, mut failed) = (0, 0);
    for (w, r) in snapshot.iter().zip(results) {
        let load = r
            .ok()
            .filter(|(s, _, _)| s.is_success())
            .and_then(|(_, _, b)| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|v| parse_load(&v));
        match load {
            Some(_) => ok += 1,
            None => failed += 1,
        }
        loads.push(json!({"worker": w.url, "worker_type": w.spec.worker_type(), "load": load.unwrap_or(-1)}));
    }
    json(
        StatusCode::OK,
        &json!({"loads": loads, "total_workers": snapshot.len(), "successful": ok, "failed": failed}),
    )
}

/// `GET /engine_metrics`: every worker's `/metrics`, merged with a `worker_addr` label.
pub(crate) async fn engine_metrics(state: &AppState) -> Response<RouterBody> {
    let (snapshot, results) = get_all(state, "/metrics").await;
    let sources: Vec<(String, String)> = snapshot
        .iter()
        .zip(results)
        .filter_map(|(w, r)| match r {
            Ok((s, _, b)) if s.is_success() => {
                Some((w.url.clone(), String::from_utf8_lossy(&b).into_owned()))
            }
            _ => None,
        })
        .collect();
    with_type(
        StatusCode::OK,
        engine_metrics::merge(&sources),
        "text/plain; version=0.0.4; charset=utf-8",
    )
}
