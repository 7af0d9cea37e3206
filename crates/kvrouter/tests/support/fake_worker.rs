//! A small in-process fake SGLang 0.5.23 worker (hyper): `/health`, `/server_info` with the
//! body the test sets (built by [`server_info_0_5_23`] from the real shapes in
//! `shared/reference/sglang-0.5.23.md`), `/model_info`, `/v1/loads` (settable; `/get_load`
//! answers 404 as in 0.5.23 unless the test sets it), and `/generate` answering a fixed body.
//! It can be stopped and started again on the same port (a restart behind its URL), and
//! counts the requests each path received.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use serde_json::{json, Value};

use super::stub::json_resp;

/// The port of an endpoint, for the tests that import it from here.
pub use super::http::port_of;

/// What the fake worker answers (shared with its server task, changeable while it runs).
#[derive(Default)]
pub struct FakeState {
    pub server_info: Value,
    /// `/v1/loads` body; `None`: 404.
    pub v1_loads: Option<Value>,
    /// `/get_load` body; `None`: 404 (0.5.23 has no such route).
    pub get_load: Option<Value>,
    /// Requests per path.
    pub hits: HashMap<String, u64>,
}

/// A running fake worker.
pub struct FakeWorker {
    pub url: String,
    pub port: u16,
    pub state: Arc<Mutex<FakeState>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeWorker {
    /// Starts on an ephemeral loopback port answering `server_info`.
    pub async fn start(server_info: Value) -> FakeWorker {
        let state = Arc::new(Mutex::new(FakeState {
            server_info,
            ..FakeState::default()
        }));
        Self::serve(0, state).await
    }

    /// Starts (again) on `port` with `state` (retrying while the old socket releases it).
    pub async fn serve(port: u16, state: Arc<Mutex<FakeState>>) -> FakeWorker {
        let deadline = super::wait::Deadline::after(std::time::Duration::from_secs(10));
        let listener = loop {
            match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
                Ok(l) => break l,
                Err(e) => deadline.check(&format!("the fake worker to bind port {port} ({e})")),
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        let port = listener.local_addr().expect("addr").port();
        let st = state.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let st = st.clone();
                conns.spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let st = st.clone();
                        async move { Ok::<_, Infallible>(answer(req, st).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        FakeWorker {
            url: format!("http://127.0.0.1:{port}"),
            port,
            state,
            task,
        }
    }

    /// Stops serving (the listener and every open connection), releasing the port; returns
    /// the state so the test can start a new incarnation on the same port.
    pub async fn stop(self) -> (u16, Arc<Mutex<FakeState>>) {
        self.task.abort();
        let _ = (&mut { self.task }).await;
        (self.port, self.state)
    }

    pub fn set_server_info(&self, v: Value) {
        self.state.lock().server_info = v;
    }

    pub fn set_v1_loads(&self, v: Option<Value>) {
        self.state.lock().v1_loads = v;
    }

    pub fn hits(&self, path: &str) -> u64 {
        self.state.lock().hits.get(path).copied().unwrap_or(0)
    }
}

async fn answer(req: Request<Incoming>, state: Arc<Mutex<FakeState>>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let _ = req.into_body().collect().await;
    let mut st = state.lock();
    *st.hits.entry(path.clone()).or_default() += 1;
    let not_found = json!({"detail": "Not Found"});
    match path.as_str() {
        "/health" => json_resp(200, &json!({})),
        "/server_info" => json_resp(200, &st.server_info),
        "/model_info" => json_resp(
            200,
            &json!({"model_path": "dummy", "tokenizer_path": "dummy", "is_generation": true, "weight_version": "default"}),
        ),
        "/v1/loads" => match &st.v1_loads {
            Some(v) => json_resp(200, v),
            None => json_resp(404, &not_found),
        },
        "/get_load" => match &st.get_load {
            Some(v) => json_resp(200, v),
            None => json_resp(404, &not_found),
        },
        "/generate" | "/v1/completions" | "/v1/chat/completions" => json_resp(
            200,
            &json!({"text": "ok", "meta_info": {"id": "x", "prompt_tokens": 1, "completion_tokens": 1, "cached_tokens": 0, "finish_reason": {"type": "length", "length": 1}}}),
        ),
        _ => json_resp(404, &not_found),
    }
}

/// A `/server_info` body of the shape SGLang 0.5.23 serves (trimmed to what a router reads,
/// `build_server_info` + `startup_time` + `version`): page size 16, one DP rank,
/// `max_running_requests` null, `kv_events_config` as the JSON string SGLang reports and the
/// `kv_events` block (`describe_kv_events_publisher`), and an incarnation seen in
/// `random_seed` (drawn per launch when unset) and `startup_time` (measured per launch).
pub fn server_info_0_5_23(kv_events_config: &str, kv_events: Value, incarnation: u64) -> Value {
    json!({
        "model_path": "dummy",
        "tokenizer_path": "dummy",
        "served_model_name": "dummy",
        "page_size": 16,
        "dp_size": 1,
        "tp_size": 1,
        "pp_size": 1,
        "enable_dp_attention": false,
        "max_running_requests": null,
        "random_seed": 1000 + incarnation,
        "disable_radix_cache": false,
        "kv_events_config": kv_events_config,
        "kv_events": kv_events,
        "launch_command": "python -m sglang.launch_server --model-path dummy",
        "max_total_num_tokens": 65536,
        "startup_time": {"load_weight": 0.5 + incarnation as f64, "kv_cache_allocation": 0.01, "scheduler_e2e": 1.2, "cuda_graph": {}},
        "internal_states": [{"effective_max_running_requests_per_dp": 256, "page_size": 16}],
        "version": "0.5.23",
        "frontend": "python"
    })
}

/// The two real 0.5.23 discovery forms (sglang-0.5.23.md M1) with their ports replaced:
/// `(kv_events_config, kv_events)` for a publisher on `tcp://0.0.0.0:PUB` ...
pub fn wildcard_publisher(pub_port: u16, replay_port: u16) -> (String, Value) {
    (
        format!(
            "{{\"publisher\": \"zmq\", \"endpoint\": \"tcp://0.0.0.0:{pub_port}\", \"topic\": \"\", \"replay_endpoint\": \"tcp://0.0.0.0:{replay_port}\"}}"
        ),
        json!({"publisher": "zmq", "endpoint_host": "0.0.0.0", "endpoint_port_base": pub_port, "topic": "", "block_size": 16, "dp_size": 1, "replay_endpoint_port_base": replay_port}),
    )
}

/// ... and for one on `tcp://127.0.0.1:PUB` with `"bind": true`.
pub fn bind_true_publisher(pub_port: u16, replay_port: u16) -> (String, Value) {
    (
        format!(
            "{{\"publisher\": \"zmq\", \"endpoint\": \"tcp://127.0.0.1:{pub_port}\", \"topic\": \"\", \"replay_endpoint\": \"tcp://127.0.0.1:{replay_port}\", \"bind\": true}}"
        ),
        json!({"publisher": "zmq", "endpoint_host": "127.0.0.1", "endpoint_port_base": pub_port, "topic": "", "block_size": 16, "dp_size": 1, "replay_endpoint_port_base": replay_port}),
    )
}
