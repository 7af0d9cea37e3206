//! `/server_info` in SGLang 0.5.23's shape (`entrypoints/http_server.py::server_info`):
//! `build_server_info` (the resolved `ServerArgs`, `launch_command`, the scheduler's init
//! info, the `kv_events` block of `runtime_context.describe_kv_events_publisher`), then
//! `startup_time`, `internal_states` (one `get_internal_state` per DP rank), `version`,
//! `frontend`.
//!
//! The key set and every default come from the body SGLang's own code built
//! (`tests/data/server_info/default.json`, made by `gen.py` there); the mock overrides the
//! values it has a flag or a live figure for.

use std::sync::OnceLock;

use serde_json::{json, Map, Value};

use crate::mock::config::KvEventsConfig;
use crate::mock::engine::SchedulePolicy;
use crate::mock::load::{self, range};
use crate::mock::state::MockState;

/// Version string of the 0.5.23 shape.
pub const VERSION: &str = "0.5.23";

const REFERENCE: &str = include_str!("../../../tests/data/server_info/default.json");

/// The reference body: top-level keys (without `internal_states`) and one internal state.
struct Template {
    top: Map<String, Value>,
    internal: Map<String, Value>,
}

fn template() -> &'static Template {
    static T: OnceLock<Template> = OnceLock::new();
    T.get_or_init(|| {
        let mut top = match serde_json::from_str::<Value>(REFERENCE) {
            Ok(Value::Object(m)) => m,
            other => {
                tracing::error!("server_info reference body is not a JSON object: {other:?}");
                Map::new()
            }
        };
        let internal = match top.remove("internal_states") {
            Some(Value::Array(mut v)) if !v.is_empty() => match v.swap_remove(0) {
                Value::Object(m) => m,
                _ => Map::new(),
            },
            _ => Map::new(),
        };
        Template { top, internal }
    })
}

fn policy_name(p: SchedulePolicy) -> &'static str {
    match p {
        SchedulePolicy::Fcfs => "fcfs",
        SchedulePolicy::Lpm => "lpm",
    }
}

/// The `ServerArgs` fields the mock has a value for (set only where the reference has the key).
fn server_args(state: &MockState) -> Vec<(&'static str, Value)> {
    let a = &state.args;
    vec![
        ("model_path", json!(a.model_path)),
        ("tokenizer_path", json!(a.model_path)),
        ("served_model_name", json!(a.model_name())),
        ("host", json!(a.host)),
        ("port", json!(state.port)),
        ("page_size", json!(a.page_size)),
        ("dp_size", json!(a.dp_size)),
        ("tp_size", json!(a.tp_size)),
        ("kv_events_config", json!(state.kv_events_config)),
        ("load_publish_endpoint", json!(a.load_publish_endpoint)),
        ("max_running_requests", json!(a.max_running_requests)),
        ("max_total_tokens", json!(a.max_total_tokens)),
        ("max_prefill_tokens", json!(a.max_prefill_tokens)),
        ("chunked_prefill_size", json!(a.chunked_prefill_size)),
        ("context_length", json!(a.effective_context_length())),
        ("schedule_policy", json!(policy_name(a.schedule_policy))),
        ("load_balance_method", json!(a.load_balance_method)),
        ("random_seed", json!(state.launch.random_seed)),
        ("weight_version", json!(&*state.weight_version())),
        ("api_key", json!(a.api_key.as_ref().map(|_| "***"))),
        // The mock always serves /metrics and reports cached_tokens.
        ("enable_metrics", json!(true)),
        ("enable_cache_report", json!(true)),
        // Namespaces and HiCache (`lora.rs`, `cache/host.rs`); enable_lora stays null unless
        // LoRA is on, as SGLang's resolution leaves it.
        ("enable_lora", json!(state.adapters.enabled.then_some(true))),
        (
            "enable_hierarchical_cache",
            json!(a.enable_hierarchical_cache),
        ),
        (
            "hicache_ratio",
            json!(a
                .hicache_ratio
                .unwrap_or(crate::mock::config::DEFAULT_HICACHE_RATIO)),
        ),
        ("hicache_write_policy", json!(a.hicache_write_policy)),
        // PD role (`crate::mock::pd`): the bound bootstrap port; a decode without its radix
        // cache runs `disable_radix_cache` (`arg_groups/pd_disaggregation_hook.py`).
        ("disaggregation_mode", json!(state.pd.mode.as_str())),
        (
            "disaggregation_bootstrap_port",
            json!(state.pd.bootstrap_port),
        ),
        (
            "disaggregation_decode_enable_radix_cache",
            json!(a.disaggregation_decode_enable_radix_cache),
        ),
        (
            "disable_radix_cache",
            json!(state.pd.mode == crate::mock::pd::state::Mode::Decode && !state.pd.decode_radix),
        ),
        // A prefill's default DP dispatch (`arg_groups/serving_hook.py`
        // `handle_load_balance_method`: `auto` -> `follow_bootstrap_room` for PD prefill).
        (
            "load_balance_method",
            json!(if state.pd.mode == crate::mock::pd::state::Mode::Prefill {
                "follow_bootstrap_room"
            } else {
                a.load_balance_method.as_str()
            }),
        ),
    ]
}

fn set_known(m: &mut Map<String, Value>, k: &str, v: Value) {
    if let Some(slot) = m.get_mut(k) {
        *slot = v;
    }
}

/// `describe_kv_events_publisher` for the mock's reported (actual-port) configuration:
/// `None` when publishing is off or the endpoint is not a routable TCP address; the load
/// keys when `--load-publish-endpoint` resolves; the replay base when the replay endpoint
/// is TCP.
pub fn describe_kv_events(
    reported_kv_config: Option<&str>,
    block_size: usize,
    dp_size: usize,
    load_mode: Option<&str>,
) -> Option<Value> {
    let cfg = KvEventsConfig::parse(reported_kv_config?).ok()?;
    if !cfg.enabled() || cfg.endpoint.is_empty() || block_size == 0 {
        return None;
    }
    let (host, port) = range::advertisable(Some(&cfg.endpoint))?;
    let mut d = Map::new();
    d.insert("publisher".into(), cfg.publisher.clone().into());
    d.insert("endpoint_host".into(), host.into());
    d.insert("endpoint_port_base".into(), port.into());
    d.insert("topic".into(), cfg.topic.clone().into());
    d.insert("block_size".into(), block_size.into());
    d.insert("dp_size".into(), dp_size.into());
    if let Ok(Some(r)) = range::resolve(
        Some(&cfg.endpoint),
        cfg.replay_endpoint.as_deref(),
        dp_size,
        load_mode,
    ) {
        d.insert("load_endpoint_port_base".into(), r.base.into());
        d.insert(
            "load_topic".into(),
            String::from_utf8_lossy(load::publisher::TOPIC).into(),
        );
    }
    if let Some((_, replay)) = range::advertisable(cfg.replay_endpoint.as_deref()) {
        d.insert("replay_endpoint_port_base".into(), replay.into());
    }
    Some(Value::Object(d))
}

/// `Scheduler.startup_time` (`observability/startup_time.py::build_scheduler_startup_time`):
/// this launch's measured phase durations (`state::Launch`) in the reference's shape (its
/// `cuda_graph` map stays all zero: the mock captures no graphs). Measured, so it differs
/// between two launches with the same flags, as SGLang's does.
fn startup_time(t: &Template, state: &MockState) -> Value {
    let mut v = t.top.get("startup_time").cloned().unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        let l = &state.launch;
        set_known(m, "load_weight", json!(l.load_weight));
        set_known(m, "kv_cache_allocation", json!(l.kv_cache_allocation));
        set_known(m, "scheduler_e2e", json!(l.scheduler_e2e));
    }
    v
}

/// The whole body.
pub fn body(state: &MockState) -> Value {
    let t = template();
    let a = &state.args;
    let args = server_args(state);
    let mut top = t.top.clone();
    for (k, v) in &args {
        set_known(&mut top, k, v.clone());
    }
    // Scheduler.get_init_info.
    set_known(&mut top, "max_total_num_tokens", json!(a.max_total_tokens));
    set_known(
        &mut top,
        "max_req_input_len",
        json!(a.effective_context_length().saturating_sub(1)),
    );
    if let Some(Value::Object(layout)) = top.get_mut("hicache_object_layout") {
        set_known(layout, "page_size", json!(a.page_size));
    }
    let kv = describe_kv_events(
        state.kv_events_config.as_deref(),
        a.page_size,
        a.dp_size,
        a.load_publish_endpoint.as_deref(),
    );
    set_known(&mut top, "kv_events", kv.unwrap_or(Value::Null));
    set_known(&mut top, "version", json!(VERSION));
    let startup = startup_time(t, state);
    set_known(&mut top, "startup_time", startup.clone());
    let internal: Vec<Value> = state
        .views()
        .into_iter()
        .map(|(_, v)| {
            let mut s = t.internal.clone();
            for (k, val) in &args {
                set_known(&mut s, k, val.clone());
            }
            set_known(&mut s, "world_size", json!(a.dp_size * a.tp_size));
            set_known(&mut s, "startup_time", startup.clone());
            set_known(
                &mut s,
                "effective_max_running_requests_per_dp",
                json!(a.max_running()),
            );
            set_known(&mut s, "last_gen_throughput", json!(v.gen_throughput));
            if let Some(Value::Object(mem)) = s.get_mut("memory_usage") {
                set_known(mem, "token_capacity", json!(a.max_total_tokens));
            }
            Value::Object(s)
        })
        .collect();
    // Keep SGLang's key order: internal_states sits between startup_time and version.
    let mut internal = Some(Value::Array(internal));
    let mut out = Map::with_capacity(top.len() + 1);
    for (k, v) in top {
        if k == "version" {
            if let Some(i) = internal.take() {
                out.insert("internal_states".into(), i);
            }
        }
        out.insert(k, v);
    }
    if let Some(i) = internal {
        out.insert("internal_states".into(), i);
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_parses_with_internal_state() {
        let t = template();
        assert!(t.top.len() > 500, "{}", t.top.len());
        assert!(t
            .internal
            .contains_key("effective_max_running_requests_per_dp"));
        assert_eq!(t.top.get("version"), Some(&json!("0.5.23")));
    }

    #[test]
    fn describe_matches_sglang_rules() {
        let d = describe_kv_events(
            Some(r#"{"publisher":"zmq","endpoint":"tcp://*:19001","replay_endpoint":"tcp://*:19002"}"#),
            16,
            1,
            Some("auto"),
        )
        .unwrap();
        assert_eq!(
            d,
            json!({"publisher": "zmq", "endpoint_host": "*", "endpoint_port_base": 19001,
                   "topic": "", "block_size": 16, "dp_size": 1,
                   "load_endpoint_port_base": 19003, "load_topic": "load",
                   "replay_endpoint_port_base": 19002})
        );
        assert!(describe_kv_events(Some(r#"{"publisher":"null"}"#), 16, 1, None).is_none());
        assert!(describe_kv_events(
            Some(r#"{"publisher":"zmq","endpoint":"ipc:///x"}"#),
            16,
            1,
            None
        )
        .is_none());
        assert!(describe_kv_events(None, 16, 1, None).is_none());
    }
}
