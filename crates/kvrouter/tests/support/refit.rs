//! Refit helpers: a router running inside the test process (so a test can listen on its
//! cache-invalidation hook), its `/refit/state`, and `/generate` reporting the weight version.

use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use parking_lot::Mutex;
use serde_json::Value;

use kvrouter::config::{Cli, Config, FileConfig};
use kvrouter::refit::{CacheCleared, CacheInvalidation};
use kvrouter::server::{self, AppState};

use super::http::{self, client};
use super::procs::FAST_HEALTH;
use super::wait::wait_for;

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

/// `GET /refit/state`.
pub async fn refit_state(router: &str) -> Value {
    http::get(router, "/refit/state").await.1
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
    let (status, worker, v) = http::generate(&client(), router, &body).await;
    let version = v["meta_info"]["weight_version"]
        .as_str()
        .map(str::to_string);
    (status, worker.unwrap_or_default(), version)
}
