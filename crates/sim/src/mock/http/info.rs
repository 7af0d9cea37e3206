//! Read-only routes: health, model and server info, load reports, version, metrics.

use http::StatusCode;
use serde_json::{json, Map, Value};

use super::respond::{empty, ok, text, Resp};
use crate::mock::state::MockState;

/// Version string of the older shape (`--sglang-version 0.5.9`).
pub const VERSION: &str = "0.5.9";

/// The SGLang version the mock imitates (`--sglang-version`).
pub fn version_of(state: &MockState) -> &'static str {
    if state.args.legacy_info() {
        VERSION
    } else {
        super::server_info::VERSION
    }
}

/// `/health` and `/health_generate`: 503 during warm-up or when a hook says so.
pub fn health(state: &MockState) -> Resp {
    if state.healthy() {
        empty(StatusCode::OK)
    } else {
        empty(StatusCode::SERVICE_UNAVAILABLE)
    }
}

/// `/model_info` and `/get_model_info`.
pub fn model_info(state: &MockState) -> Resp {
    ok(&json!({
        "model_path": state.args.model_path,
        "tokenizer_path": state.args.model_path,
        "is_generation": true,
        "preferred_sampling_params": null,
        "weight_version": &*state.weight_version(),
        "has_image_understanding": false,
        "has_audio_understanding": false,
        "model_type": "mock",
        "architectures": ["MockForCausalLM"],
    }))
}

/// `GET /get_weight_version`.
pub fn weight_version(state: &MockState) -> Resp {
    ok(&json!({"weight_version": &*state.weight_version()}))
}

/// `GET /version`.
pub fn version(state: &MockState) -> Resp {
    ok(&json!({"version": version_of(state)}))
}

fn server_args(state: &MockState) -> Map<String, Value> {
    let a = &state.args;
    let v = json!({
        "model_path": a.model_path,
        "tokenizer_path": a.model_path,
        "served_model_name": a.model_name(),
        "host": a.host,
        "port": state.port,
        "page_size": a.page_size,
        "dp_size": a.dp_size,
        "tp_size": a.tp_size,
        "pp_size": 1,
        "ep_size": 1,
        "nnodes": 1,
        "kv_events_config": state.kv_events_config,
        "max_running_requests": a.max_running(),
        "max_total_tokens": a.max_total_tokens,
        "max_prefill_tokens": a.max_prefill_tokens,
        "chunked_prefill_size": a.chunked_prefill_size,
        "context_length": a.effective_context_length(),
        "schedule_policy": "fcfs",
        "load_balance_method": a.load_balance_method,
        "disable_radix_cache": false,
        "enable_metrics": true,
        "enable_cache_report": true,
        "enable_dp_attention": false,
        "skip_tokenizer_init": false,
        "stream_interval": 1,
        "random_seed": state.launch.random_seed,
        "weight_version": &*state.weight_version(),
        "api_key": a.api_key.as_ref().map(|_| "***"),
        "mock": {"speedup": a.speedup, "vocab_size": a.vocab_size, "prefill_coeffs": a.prefill_coeffs, "decode_coeffs": a.decode_coeffs},
    });
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// `/server_info` and `/get_server_info` (0.5.23 still serves the deprecated alias,
/// `entrypoints/http_server.py::get_server_info`): the 0.5.23 body, or the older one.
pub fn server_info(state: &MockState) -> Resp {
    if state.args.legacy_info() {
        server_info_0_5_9(state)
    } else {
        ok(&super::server_info::body(state))
    }
}

/// The older body: ServerArgs, then scheduler info, then `internal_states` per DP rank,
/// then `version` (one flat object, 34 keys).
fn server_info_0_5_9(state: &MockState) -> Resp {
    let a = &state.args;
    let args = server_args(state);
    let mut m = args.clone();
    m.insert("status".into(), "ready".into());
    m.insert("max_total_num_tokens".into(), a.max_total_tokens.into());
    m.insert(
        "max_req_input_len".into(),
        (a.effective_context_length() - 1).into(),
    );
    let internal: Vec<Value> = state
        .views()
        .into_iter()
        .map(|(rank, v)| {
            let mut s = args.clone();
            s.insert("dp_rank".into(), rank.into());
            s.insert("last_gen_throughput".into(), v.gen_throughput.into());
            s.insert(
                "memory_usage".into(),
                json!({"weight": 0.0, "kvcache": 0.0, "token_capacity": a.max_total_tokens, "graph": 0.0}),
            );
            s.insert("effective_max_running_requests_per_dp".into(), a.max_running().into());
            s.insert("paused".into(), v.paused.into());
            Value::Object(s)
        })
        .collect();
    m.insert("internal_states".into(), Value::Array(internal));
    m.insert("version".into(), VERSION.into());
    ok(&Value::Object(m))
}

/// `GET /get_load` (0.5.9 shape only; 0.5.23 has no such route): a list per DP rank.
pub fn get_load(state: &MockState) -> Resp {
    let list: Vec<Value> = state
        .views()
        .into_iter()
        .map(|(rank, v)| {
            json!({
                "dp_rank": rank,
                "num_reqs": v.snap.running + v.snap.waiting,
                "num_waiting_reqs": v.snap.waiting,
                "num_tokens": v.snap.used_tokens + v.snap.waiting_prompt_tokens,
            })
        })
        .collect();
    ok(&Value::Array(list))
}

/// `GET /metrics`.
pub fn metrics(state: &MockState) -> Resp {
    let body = state
        .metrics
        .render(&state.views(), state.args.max_total_tokens);
    let mut r = text(StatusCode::OK, body);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}
