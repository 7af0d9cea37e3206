//! Test hooks under `/mock/*` (not part of SGLang): inject failures, flip health, and
//! read the engine's internal counters.

use std::sync::atomic::Ordering;

use http::StatusCode;
use serde_json::{json, Value};

use super::respond::{native_error, ok, Resp};
use crate::mock::state::MockState;

/// `POST /mock/fail_next {"path": "/update_weights_from_disk", "count": 1}`.
pub fn fail_next(state: &MockState, bytes: &[u8]) -> Resp {
    let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    let Some(path) = v.get("path").and_then(Value::as_str) else {
        return native_error(
            StatusCode::BAD_REQUEST,
            "fail_next needs {\"path\": \"/route\", \"count\"?: n}",
        );
    };
    let count = v
        .get("count")
        .and_then(Value::as_u64)
        .unwrap_or(1)
        .min(u64::from(u32::MAX)) as u32;
    state.hooks.fail_next(path, count);
    ok(&json!({"success": true, "path": path, "count": count}))
}

/// `POST /mock/set_health {"healthy": bool}`.
pub fn set_health(state: &MockState, bytes: &[u8]) -> Resp {
    let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    let Some(healthy) = v.get("healthy").and_then(Value::as_bool) else {
        return native_error(
            StatusCode::BAD_REQUEST,
            "set_health needs {\"healthy\": bool}",
        );
    };
    state.hooks.unhealthy.store(!healthy, Ordering::Relaxed);
    ok(&json!({"success": true, "healthy": healthy}))
}

/// `GET /mock/state`: per-rank scheduler counters.
pub fn engine_state(state: &MockState) -> Resp {
    let ranks: Vec<Value> = state
        .views()
        .into_iter()
        .map(|(rank, v)| {
            json!({
                "dp_rank": rank,
                "running": v.snap.running,
                "waiting": v.snap.waiting,
                "paused": v.paused,
                "used_tokens": v.snap.used_tokens,
                "cached_tokens_resident": v.snap.tree_tokens,
                "evictable_tokens": v.snap.evictable_tokens,
            })
        })
        .collect();
    ok(
        &json!({"weight_version": &*state.weight_version(), "ranks": ranks,
               "pd_rooms": state.pd.rooms.len()}),
    )
}
