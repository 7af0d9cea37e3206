//! Control routes: `/flush_cache`, `/abort_request`, `/pause_generation`,
//! `/continue_generation`, the weight-refit family, `/update_weight_version` and
//! `/release|resume_memory_occupation`. Each call fans out to every DP rank.

use std::sync::Arc;

use http::StatusCode;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::respond::{empty, json, native_error, ok, text, Resp};
use crate::mock::engine::{Command, PauseMode, WeightUpdate};
use crate::mock::state::{next_version, MockState};

const FLUSH_MESSAGE: &str = "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n";

/// Parses an optional JSON object body (empty body = `{}`).
fn object(bytes: &[u8]) -> Result<Value, String> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(Value::Null) => Ok(json!({})),
        Ok(_) => Err("request body must be a JSON object".into()),
        Err(e) => Err(format!("invalid request body: {e}")),
    }
}

async fn ask_all<T>(state: &MockState, make: impl Fn(oneshot::Sender<T>) -> Command) -> Vec<T> {
    let mut waits = Vec::with_capacity(state.ranks.len());
    for r in &state.ranks {
        let (tx, rx) = oneshot::channel();
        let _ = r.inbox.send(make(tx));
        waits.push(rx);
    }
    let mut out = Vec::with_capacity(waits.len());
    for w in waits {
        if let Ok(v) = w.await {
            out.push(v);
        }
    }
    out
}

/// `GET|POST /flush_cache`: 200 when every rank was idle and flushed, else 400.
pub async fn flush_cache(state: &MockState) -> Resp {
    let results = ask_all(state, Command::Flush).await;
    let all = results.len() == state.ranks.len() && results.iter().all(|&b| b);
    text(
        if all {
            StatusCode::OK
        } else {
            StatusCode::BAD_REQUEST
        },
        FLUSH_MESSAGE,
    )
}

/// `POST /abort_request {"rid", "abort_all"}`.
pub fn abort_request(state: &MockState, bytes: &[u8]) -> Resp {
    let b = match object(bytes) {
        Ok(b) => b,
        Err(m) => return native_error(StatusCode::BAD_REQUEST, m),
    };
    let rid = b.get("rid").and_then(Value::as_str).map(str::to_string);
    let all = b.get("abort_all").and_then(Value::as_bool).unwrap_or(false);
    for r in &state.ranks {
        let _ = r.inbox.send(Command::Abort {
            rid: rid.clone(),
            all,
        });
    }
    empty(StatusCode::OK)
}

/// `POST /pause_generation {"mode": "abort"|"retract"|"in_place"}`.
pub async fn pause(state: &MockState, bytes: &[u8]) -> Resp {
    let b = match object(bytes) {
        Ok(b) => b,
        Err(m) => return native_error(StatusCode::BAD_REQUEST, m),
    };
    let mode = match b.get("mode").and_then(Value::as_str).unwrap_or("abort") {
        "abort" => PauseMode::Abort,
        "retract" => PauseMode::Retract,
        "in_place" => PauseMode::InPlace,
        other => {
            return native_error(
                StatusCode::BAD_REQUEST,
                format!("Invalid pause mode {other:?}; expected abort, retract or in_place."),
            )
        }
    };
    ask_all(state, |tx| Command::Pause(mode, tx)).await;
    ok(&json!({"message": "Generation paused successfully.", "status": "ok"}))
}

/// `POST /continue_generation`.
pub async fn resume(state: &MockState) -> Resp {
    ask_all(state, Command::Continue).await;
    ok(&json!({"message": "Generation continued successfully.", "status": "ok"}))
}

fn refit_failure(message: impl Into<String>) -> Resp {
    json(
        StatusCode::BAD_REQUEST,
        &json!({"success": false, "message": message.into()}),
    )
}

fn injected(state: &MockState, path: &str) -> bool {
    state.hooks.take_failure(path) || state.args.fail_weight_updates
}

/// The weight-update routes: validate, bump the version (to `weight_version` or the
/// deterministic next one) and, with `flush_cache` (default true), drain and flush.
pub async fn update_weights(state: &Arc<MockState>, path: &str, bytes: &[u8]) -> Resp {
    let b = match object(bytes) {
        Ok(b) => b,
        Err(m) => return refit_failure(m),
    };
    let required: &[&str] = match path {
        "/update_weights_from_disk" => &["model_path"],
        "/update_weights_from_distributed" => &["names", "dtypes", "shapes"],
        "/update_weights_from_tensor" => &["serialized_named_tensors"],
        _ => &[],
    };
    if let Some(missing) = required
        .iter()
        .find(|k| b.get(**k).is_none_or(Value::is_null))
    {
        return refit_failure(format!("Missing required field {missing:?}."));
    }
    if injected(state, path) {
        return refit_failure("Failed to update weights: mock: injected failure.");
    }
    let version: Arc<str> = match b.get("weight_version").and_then(Value::as_str) {
        Some(v) => Arc::from(v),
        None => Arc::from(next_version(&state.weight_version())),
    };
    let flush = b
        .get("flush_cache")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let abort_all = b
        .get("abort_all_requests")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    ask_all(state, |done| {
        Command::Weights(WeightUpdate {
            version: version.clone(),
            flush,
            abort_all,
            drain: flush,
            done,
        })
    })
    .await;
    state.set_weight_version(version.clone());
    let mut message = String::from("Succeeded to update model weights.");
    if b.get("weight_version").and_then(Value::as_str).is_some() {
        message.push_str(&format!(" Weight version updated to {version}."));
    }
    ok(&json!({"success": true, "message": message, "num_paused_requests": 0}))
}

/// `/init_weights_update_group`, `/destroy_weights_update_group` and the sglang-miles
/// `/begin_weight_update` / `/end_weight_update` markers (they only answer).
pub fn weights_group(state: &MockState, path: &str, bytes: &[u8]) -> Resp {
    let b = match object(bytes) {
        Ok(b) => b,
        Err(m) => return refit_failure(m),
    };
    let init = path == "/init_weights_update_group";
    if init {
        for k in ["master_address", "master_port", "rank_offset", "world_size"] {
            if b.get(k).is_none_or(Value::is_null) {
                return refit_failure(format!("Missing required field {k:?}."));
            }
        }
    }
    if injected(state, path) {
        return refit_failure("mock: injected failure.");
    }
    let message = match path {
        "/init_weights_update_group" => "Succeeded to initialize custom process group.",
        "/destroy_weights_update_group" => "Succeeded to destroy custom process group.",
        _ => "Success.",
    };
    ok(&json!({"success": true, "message": message}))
}

/// `POST /update_weight_version {"new_version", "abort_all_requests"=true}`.
pub async fn update_weight_version(state: &MockState, bytes: &[u8]) -> Resp {
    let b = match object(bytes) {
        Ok(b) => b,
        Err(m) => return refit_failure(m),
    };
    let Some(v) = b.get("new_version").and_then(Value::as_str) else {
        return refit_failure("Missing required field \"new_version\" (a string).");
    };
    if state.hooks.take_failure("/update_weight_version") {
        return refit_failure("mock: injected failure.");
    }
    let version: Arc<str> = Arc::from(v);
    let abort_all = b
        .get("abort_all_requests")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    ask_all(state, |done| {
        Command::Weights(WeightUpdate {
            version: version.clone(),
            flush: false,
            abort_all,
            drain: false,
            done,
        })
    })
    .await;
    state.set_weight_version(version.clone());
    ok(
        &json!({"success": true, "message": format!("Weight version updated to {version}."), "new_version": &*version}),
    )
}

/// `/release_memory_occupation` (idle only; flushes unless only non-KV tags are given)
/// and `/resume_memory_occupation`: 200 with `null`, or 400.
pub async fn memory(state: &MockState, release: bool, bytes: &[u8]) -> Resp {
    let b = match object(bytes) {
        Ok(b) => b,
        Err(m) => return native_error(StatusCode::BAD_REQUEST, m),
    };
    let flush_kv = match b.get("tags") {
        None | Some(Value::Null) => true,
        Some(Value::Array(tags)) if tags.is_empty() => true,
        Some(Value::Array(tags)) => tags.iter().any(|t| t.as_str() == Some("kv_cache")),
        Some(_) => return native_error(StatusCode::BAD_REQUEST, "tags must be a list of strings"),
    };
    let path = if release {
        "/release_memory_occupation"
    } else {
        "/resume_memory_occupation"
    };
    if state.hooks.take_failure(path) {
        return native_error(StatusCode::BAD_REQUEST, "mock: injected failure");
    }
    let results = ask_all(state, |done| Command::Memory {
        release,
        flush_kv,
        done,
    })
    .await;
    if results.iter().all(|&b| b) {
        ok(&Value::Null)
    } else {
        native_error(
            StatusCode::BAD_REQUEST,
            "release_memory_occupation requires an idle server",
        )
    }
}
