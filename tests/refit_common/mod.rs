//! Helpers for the `refit_*` tests: an in-process router (so a test can listen on its
//! cache-invalidation hook), JSON calls, and a mock on a fixed port that can be restarted.
//! Include with `mod router_common; mod refit_common;`.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use parking_lot::Mutex;
use serde_json::Value;

use kvrouter::config::{Cli, Config, FileConfig};
use kvrouter::refit::{CacheCleared, CacheInvalidation};
use kvrouter::server::{self, AppState};

use crate::router_common::{client, support, wait_for, FAST_HEALTH};

/// Every cache-cleared event, with when it was heard.
#[derive(Default)]
pub struct Recorder {
    pub events: Mutex<Vec<(Instant, CacheCleared)>>,
}

impl CacheInvalidation for Recorder {
    fn cache_cleared(&self, e: &CacheCleared) {
        self.events.lock().push((Instant::now(), e.clone()));
    }
}

/// A router running inside the test process.
pub struct InProcessRouter {
    pub state: Arc<AppState>,
    pub url: String,
    pub recorder: Arc<Recorder>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for InProcessRouter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts a router in this process over `workers` (plus `extra` flags) and waits until all
/// are routable. A [`Recorder`] listens on the cache hook.
pub async fn in_process_router(workers: &[&str], extra: &[&str]) -> InProcessRouter {
    let joined = workers.join(",");
    let mut args: Vec<&str> = vec!["router", "--worker-urls", &joined, "--port", "0"];
    args.extend_from_slice(FAST_HEALTH);
    args.extend_from_slice(extra);
    let config = Config::from_sources(Cli::parse_from(args), FileConfig::default())
        .expect("valid router config");
    let state = AppState::new(config);
    let recorder = Arc::new(Recorder::default());
    state.refit.cache.add_listener(recorder.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    server::register_startup_workers(&state);
    let task = tokio::spawn({
        let state = state.clone();
        async move {
            let _ = server::serve(listener, state).await;
        }
    });
    let n = workers.len();
    let st = state.clone();
    wait_for("all workers routable", || {
        let st = st.clone();
        async move { st.registry.routable().len() == n }
    })
    .await;
    InProcessRouter {
        state,
        url,
        recorder,
        task,
    }
}

/// POSTs `body` to `url`; returns the status and the JSON body (Null when not JSON).
pub async fn post(url: &str, body: Value) -> (u16, Value) {
    let r = client()
        .post(url)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// GETs `url` as JSON.
pub async fn get(url: &str) -> (u16, Value) {
    let r = client()
        .get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// `GET /refit/state`.
pub async fn refit_state(router: &str) -> Value {
    get(&format!("{router}/refit/state")).await.1
}

/// Starts `sglang-mock` on a fixed `port` (so it can be restarted behind the same URL).
pub fn mock_on(port: u16, args: &[&str]) -> support::Proc {
    let port = port.to_string();
    let mut all = vec!["--host", "127.0.0.1", "--port", port.as_str()];
    all.extend_from_slice(args);
    support::Proc::spawn(env!("CARGO_BIN_EXE_sglang-mock"), &all)
}

/// One `/generate` through `router`: (status, serving worker header, weight_version).
pub async fn generate(
    router: &str,
    rid: Option<&str>,
    max_new: u32,
) -> (u16, String, Option<String>) {
    let mut body = serde_json::json!({"input_ids": [1, 2, 3, 4, 5, 6, 7, 8],
        "sampling_params": {"max_new_tokens": max_new, "temperature": 0}});
    if let Some(rid) = rid {
        body["rid"] = Value::String(rid.to_string());
    }
    let r = client()
        .post(format!("{router}/generate"))
        .json(&body)
        .send()
        .await
        .expect("generate");
    let status = r.status().as_u16();
    let worker = r
        .headers()
        .get("x-kvrouter-worker")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    let version = v["meta_info"]["weight_version"]
        .as_str()
        .map(str::to_string);
    (status, worker, version)
}
