//! `WorkerInfo`: what a worker says about itself in `/server_info` and `/model_info`,
//! parsed tolerantly (missing or oddly typed fields fall back to SGLang's defaults).

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub(crate) use super::kv_block::KvEventsBlock;

/// Static facts about one SGLang worker, read at registration (and again after a restart).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// KV page size in tokens (SGLang's default when absent is 1).
    pub page_size: u32,
    /// Data-parallel size: number of independent KV caches (ranks) in this worker.
    pub dp_size: u32,
    /// Tensor-parallel size.
    pub tp_size: u32,
    /// Pipeline-parallel size.
    pub pp_size: u32,
    /// DP attention: DP ranks share the TP group's GPUs instead of multiplying them.
    pub enable_dp_attention: bool,
    /// KV event publishing, when the worker was started with `--kv-events-config`.
    pub kv_events: Option<KvEventsConfig>,
    /// The `kv_events` discovery block of SGLang 0.5.23+ (`describe_kv_events_publisher`);
    /// when present it names the endpoints (the `kv_events_config` string is the fallback).
    pub kv_events_block: Option<KvEventsBlock>,
    /// KV capacity in tokens (per DP rank), if reported.
    pub max_total_num_tokens: Option<u64>,
    /// Concurrency limit, if reported.
    pub max_running_requests: Option<u64>,
    /// Name the worker serves its model under (`served_model_name`, else `model_path`).
    pub served_model_name: Option<String>,
    /// Path or hub id of the model.
    pub model_path: Option<String>,
    /// Weight version at the time of the probe (`/model_info` wins over `/server_info`).
    pub weight_version: Option<String>,
    /// Whether the radix cache is disabled (then prefix-aware routing buys nothing).
    pub disable_radix_cache: bool,
    /// SGLang version string, if reported.
    pub version: Option<String>,
    /// What tells one launch of the worker from the next behind the same URL
    /// ([`incarnation_marker`]); `None` when the server info has none (older SGLang, mocks).
    #[serde(default)]
    pub incarnation: Option<String>,
}

impl Default for WorkerInfo {
    fn default() -> Self {
        WorkerInfo {
            page_size: 1,
            dp_size: 1,
            tp_size: 1,
            pp_size: 1,
            enable_dp_attention: false,
            kv_events: None,
            kv_events_block: None,
            max_total_num_tokens: None,
            max_running_requests: None,
            served_model_name: None,
            model_path: None,
            weight_version: None,
            disable_radix_cache: false,
            version: None,
            incarnation: None,
        }
    }
}

/// SGLang's `KVEventsConfig` (`--kv-events-config`), see sglang-worker.md §A3.1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvEventsConfig {
    /// `"zmq"` publishes; `"null"` disables.
    pub publisher: String,
    /// PUB endpoint of DP rank 0 (`tcp://*:5557` by default); rank r uses port + r.
    pub endpoint: String,
    /// ROUTER endpoint for replays of DP rank 0, if any; rank r uses port + r.
    pub replay_endpoint: Option<String>,
    /// Topic frame (empty by default).
    pub topic: String,
    /// Batches kept for replay.
    pub buffer_steps: Option<u64>,
    /// `"bind"`: an explicit bind (true) or connect (false) of the PUB socket; `None` leaves
    /// it to SGLang's endpoint heuristic ([`KvEventsConfig::worker_binds`]).
    #[serde(default)]
    pub bind: Option<bool>,
}

impl Default for KvEventsConfig {
    fn default() -> Self {
        KvEventsConfig {
            publisher: "null".to_string(),
            endpoint: "tcp://*:5557".to_string(),
            replay_endpoint: None,
            topic: String::new(),
            buffer_steps: None,
            bind: None,
        }
    }
}

impl KvEventsConfig {
    /// Parses the `kv_events_config` field: a JSON string (what SGLang reports), an
    /// object, or null. Returns `None` for null/empty/unparseable values.
    pub fn from_field(v: &Value) -> Option<KvEventsConfig> {
        let obj = match v {
            Value::String(s) if s.trim().is_empty() => return None,
            Value::String(s) => serde_json::from_str::<Value>(s).ok()?,
            Value::Object(_) => v.clone(),
            _ => return None,
        };
        let obj = obj.as_object()?;
        let d = KvEventsConfig::default();
        Some(KvEventsConfig {
            publisher: str_field(obj.get("publisher")).unwrap_or(d.publisher),
            endpoint: str_field(obj.get("endpoint")).unwrap_or(d.endpoint),
            replay_endpoint: str_field(obj.get("replay_endpoint")),
            topic: str_field(obj.get("topic")).unwrap_or(d.topic),
            buffer_steps: obj.get("buffer_steps").and_then(u64_field),
            bind: obj.get("bind").and_then(bool_field),
        })
    }

    /// True when the worker actually publishes events (publisher `zmq`).
    pub fn is_enabled(&self) -> bool {
        self.publisher.eq_ignore_ascii_case("zmq")
    }

    /// Whether the worker's publisher binds — then subscribers dial it; otherwise it
    /// connects out to a subscriber that must bind the endpoint. SGLang 0.5.23
    /// (`disaggregation/kv_events.py` `ZmqEventPublisher._socket_setup`): `"bind"` when set,
    /// else bind when the endpoint contains `*`, `::` or `0.0.0.0`, or is `ipc://`/`inproc://`.
    pub fn worker_binds(&self) -> bool {
        if let Some(bind) = self.bind {
            return bind;
        }
        let e = self.endpoint.as_str();
        e.contains('*')
            || e.contains("::")
            || e.contains("0.0.0.0")
            || e.starts_with("ipc://")
            || e.starts_with("inproc://")
    }

    /// The PUB endpoint a subscriber should dial for `rank`, with a wildcard host
    /// (`*`, `0.0.0.0`, `::`) replaced by `worker_host` and the port offset by the rank.
    /// An `ipc://PATH` endpoint is dialled as written for rank 0 (a Unix socket on the
    /// worker's host: the router must share it); `None` for other ranks of an ipc endpoint,
    /// `inproc://` and anything else.
    pub fn dial_endpoint(&self, worker_host: &str, rank: u32) -> Option<String> {
        dial(&self.endpoint, worker_host, rank)
    }

    /// The replay (ROUTER) endpoint for `rank`, resolved like [`Self::dial_endpoint`].
    pub fn dial_replay_endpoint(&self, worker_host: &str, rank: u32) -> Option<String> {
        self.replay_endpoint
            .as_deref()
            .and_then(|e| dial(e, worker_host, rank))
    }
}

/// `tcp://HOST:PORT` -> `tcp://resolved:PORT+rank`; `ipc://PATH` -> itself for rank 0.
///
/// SGLang binds an ipc endpoint as given (`ZmqEventPublisher._socket_setup`) and advertises
/// no `kv_events` block for it, so the config string is all a router has. Its per-rank rule
/// (`offset_endpoint_port`) suffixes `inproc` endpoints and offsets `tcp` ports but raises for
/// ipc above rank 0, so only rank 0 of an ipc endpoint exists.
fn dial(endpoint: &str, worker_host: &str, rank: u32) -> Option<String> {
    if let Some(path) = endpoint.strip_prefix("ipc://") {
        return (rank == 0 && !path.is_empty()).then(|| endpoint.to_string());
    }
    let rest = endpoint.strip_prefix("tcp://")?;
    let (host, port) = rest.rsplit_once(':')?;
    let port: u32 = port.parse().ok()?;
    let port = port.checked_add(rank).filter(|p| *p <= u16::MAX as u32)?;
    let host = match host.trim_matches(|c| c == '[' || c == ']') {
        "*" | "0.0.0.0" | "::" | "" if worker_host.contains(':') => format!("[{worker_host}]"),
        "*" | "0.0.0.0" | "::" | "" => worker_host.to_string(),
        _ => host.to_string(),
    };
    Some(format!("tcp://{host}:{port}"))
}

impl WorkerInfo {
    /// Builds the info from a `/server_info` body and an optional `/model_info` body.
    pub fn from_json(server_info: &Value, model_info: Option<&Value>) -> WorkerInfo {
        let d = WorkerInfo::default();
        let s = server_info;
        // Scheduler-side values may sit at the top level or in internal_states[0].
        let state0 = s
            .get("internal_states")
            .and_then(Value::as_array)
            .and_then(|a| a.first());
        let find = |key: &str| -> Option<&Value> {
            s.get(key)
                .filter(|v| !v.is_null())
                .or_else(|| state0.and_then(|st| st.get(key)).filter(|v| !v.is_null()))
        };
        let model =
            |key: &str| -> Option<String> { model_info.and_then(|m| str_field(m.get(key))) };

        let positive = |key: &str, default: u32| -> u32 {
            find(key)
                .and_then(u64_field)
                .filter(|n| *n >= 1)
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(default)
        };
        WorkerInfo {
            page_size: positive("page_size", d.page_size),
            dp_size: positive("dp_size", d.dp_size),
            tp_size: positive("tp_size", d.tp_size),
            pp_size: positive("pp_size", d.pp_size),
            enable_dp_attention: find("enable_dp_attention")
                .and_then(bool_field)
                .unwrap_or(false),
            kv_events: find("kv_events_config").and_then(KvEventsConfig::from_field),
            kv_events_block: s.get("kv_events").and_then(KvEventsBlock::from_field),
            max_total_num_tokens: find("max_total_num_tokens").and_then(u64_field),
            max_running_requests: find("max_running_requests")
                .and_then(u64_field)
                .or_else(|| find("effective_max_running_requests_per_dp").and_then(u64_field)),
            served_model_name: str_field(find("served_model_name"))
                .or_else(|| str_field(find("model_path"))),
            model_path: model("model_path").or_else(|| str_field(find("model_path"))),
            weight_version: model("weight_version").or_else(|| str_field(find("weight_version"))),
            disable_radix_cache: find("disable_radix_cache")
                .and_then(bool_field)
                .unwrap_or(false),
            version: str_field(find("version")),
            incarnation: incarnation_marker(s),
        }
    }

    /// GPUs this worker occupies (for NCCL rank offsets): tp * pp, times dp unless
    /// DP attention shares the TP GPUs.
    pub fn gpu_count(&self) -> u32 {
        let base = self.tp_size.saturating_mul(self.pp_size);
        if self.enable_dp_attention {
            base
        } else {
            base.saturating_mul(self.dp_size)
        }
    }

    /// Whether KV events are published (`publisher == "zmq"`, in the block or the string).
    pub fn kv_events_enabled(&self) -> bool {
        self.kv_events_block
            .as_ref()
            .is_some_and(KvEventsBlock::is_zmq)
            || self
                .kv_events
                .as_ref()
                .is_some_and(KvEventsConfig::is_enabled)
    }

    /// Tokens per KV event block: the block's `block_size` (page size x DCP size,
    /// `kv_event_block_size_of`), else the page size. What the page-size check reads.
    pub fn event_block_size(&self) -> u32 {
        self.kv_events_block
            .as_ref()
            .and_then(|b| b.block_size)
            .unwrap_or(self.page_size)
    }
}

/// The incarnation marker of a `/server_info` body: its `startup_time` and `random_seed`,
/// rendered as compact JSON, or `None` when it has neither.
///
/// SGLang 0.5.23 has no launch timestamp or instance id in `/server_info`; these two are what
/// differ between two launches with the same flags: `startup_time` (`entrypoints/http_server.py`
/// `get_server_info`, from `observability/startup_time.py`: measured durations of weight load,
/// KV allocation, scheduler start) and `random_seed` (`arg_groups/serving_hook.py`: drawn with
/// `random.randint` per launch when `--random-seed` is unset). Either alone may repeat (a fixed
/// seed; equal timings are unlikely but possible), so both are compared.
pub(crate) fn incarnation_marker(server_info: &Value) -> Option<String> {
    let pick = |k: &str| server_info.get(k).filter(|v| !v.is_null());
    let (startup, seed) = (pick("startup_time"), pick("random_seed"));
    if startup.is_none() && seed.is_none() {
        return None;
    }
    Some(serde_json::json!([startup, seed]).to_string())
}

/// A non-empty string, or a number rendered as a string.
fn str_field(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A non-negative integer given as a number (integral float ok) or numeric string.
fn u64_field(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < u64::MAX as f64)
                .map(|f| f as u64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn bool_field(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "true" | "1" => Some(true),
            "false" | "0" => Some(false),
            _ => None,
        },
        Value::Number(n) => n.as_u64().map(|n| n != 0),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A trimmed `/get_server_info` body of the shape SGLang E3 returns (sglang-worker.md §A1.4).
    fn sglang_server_info() -> Value {
        json!({
            "model_path": "Qwen/Qwen3-8B",
            "tokenizer_path": "Qwen/Qwen3-8B",
            "served_model_name": "qwen3",
            "page_size": 16,
            "dp_size": 2,
            "tp_size": 4,
            "pp_size": 1,
            "enable_dp_attention": true,
            "weight_version": "default",
            "kv_events_config": "{\"publisher\": \"zmq\", \"endpoint\": \"tcp://*:5557\", \"topic\": \"kv\", \"replay_endpoint\": \"tcp://*:5600\"}",
            "max_running_requests": null,
            "chunked_prefill_size": 8192,
            "disable_radix_cache": false,
            "enable_metrics": true,
            "status": "ready",
            "max_total_num_tokens": 412345,
            "max_req_input_len": 40954,
            "internal_states": [{
                "page_size": 16,
                "last_gen_throughput": 0.0,
                "memory_usage": {"weight": 15.3, "kvcache": 56.1, "token_capacity": 412345, "graph": 1.2},
                "effective_max_running_requests_per_dp": 2048
            }],
            "version": "0.5.4"
        })
    }

    #[test]
    fn parses_real_shaped_server_and_model_info() {
        let model = json!({"model_path": "/models/qwen3", "tokenizer_path": "x", "is_generation": true,
            "preferred_sampling_params": null, "weight_version": "v7"});
        let info = WorkerInfo::from_json(&sglang_server_info(), Some(&model));
        assert_eq!(info.page_size, 16);
        assert_eq!(info.dp_size, 2);
        assert_eq!(info.tp_size, 4);
        assert!(info.enable_dp_attention);
        assert_eq!(info.gpu_count(), 4);
        assert_eq!(info.max_total_num_tokens, Some(412345));
        // ServerArgs says null; the per-DP effective limit is used instead.
        assert_eq!(info.max_running_requests, Some(2048));
        assert_eq!(info.served_model_name.as_deref(), Some("qwen3"));
        assert_eq!(info.model_path.as_deref(), Some("/models/qwen3"));
        assert_eq!(info.weight_version.as_deref(), Some("v7"));
        assert_eq!(info.version.as_deref(), Some("0.5.4"));
        let kv = info.kv_events.expect("kv events parsed from a JSON string");
        assert!(kv.is_enabled());
        assert_eq!(kv.topic, "kv");
        assert_eq!(
            kv.dial_endpoint("10.0.0.5", 1).as_deref(),
            Some("tcp://10.0.0.5:5558")
        );
        assert_eq!(
            kv.dial_replay_endpoint("10.0.0.5", 0).as_deref(),
            Some("tcp://10.0.0.5:5600")
        );
    }

    #[test]
    fn missing_fields_fall_back_to_sglang_defaults() {
        let info = WorkerInfo::from_json(&json!({"kv_events_config": null}), None);
        assert_eq!(info, WorkerInfo::default());
        assert_eq!(info.page_size, 1, "SGLang's default page size is 1");
        assert!(!info.kv_events_enabled());
        assert_eq!(info.gpu_count(), 1);
    }

    #[test]
    fn odd_types_are_tolerated() {
        let info = WorkerInfo::from_json(
            &json!({"page_size": "32", "dp_size": 0, "tp_size": 2.0, "weight_version": 3,
                    "kv_events_config": {"publisher": "zmq"}, "max_total_num_tokens": -5,
                    "enable_dp_attention": "false", "internal_states": "nope"}),
            Some(&json!("not an object")),
        );
        assert_eq!(info.page_size, 32);
        assert_eq!(info.dp_size, 1, "zero is not a size: default");
        assert_eq!(info.tp_size, 2);
        assert_eq!(info.gpu_count(), 2);
        assert_eq!(info.weight_version.as_deref(), Some("3"));
        assert_eq!(info.max_total_num_tokens, None);
        let kv = info.kv_events.expect("object form");
        assert_eq!(kv.endpoint, "tcp://*:5557");
        assert_eq!(kv.replay_endpoint, None);
    }

    #[test]
    fn kv_events_config_null_publisher_and_garbage() {
        let off = KvEventsConfig::from_field(&json!("{\"publisher\":\"null\"}")).expect("parsed");
        assert!(!off.is_enabled());
        assert_eq!(KvEventsConfig::from_field(&json!("{not json")), None);
        assert_eq!(KvEventsConfig::from_field(&json!("")), None);
        assert_eq!(KvEventsConfig::from_field(&json!(7)), None);
    }

    #[test]
    fn dial_endpoint_keeps_explicit_hosts_and_ipc_paths() {
        let kv = KvEventsConfig {
            endpoint: "tcp://192.168.1.2:6000".into(),
            ..KvEventsConfig::default()
        };
        assert_eq!(
            kv.dial_endpoint("h", 3).as_deref(),
            Some("tcp://192.168.1.2:6003")
        );
        let ipc = KvEventsConfig {
            endpoint: "ipc:///tmp/x".into(),
            ..KvEventsConfig::default()
        };
        assert_eq!(ipc.dial_endpoint("h", 0).as_deref(), Some("ipc:///tmp/x"));
        assert_eq!(
            ipc.dial_endpoint("h", 1),
            None,
            "SGLang has no ipc endpoint per rank"
        );
        let inproc = KvEventsConfig {
            endpoint: "inproc://cache".into(),
            ..KvEventsConfig::default()
        };
        assert_eq!(
            inproc.dial_endpoint("h", 0),
            None,
            "inside the worker's process"
        );
        assert!(ipc.worker_binds() && !kv.worker_binds());
        assert!(KvEventsConfig::default().worker_binds());
        assert_eq!(
            KvEventsConfig::default().dial_endpoint("::1", 2).as_deref(),
            Some("tcp://[::1]:5559"),
            "IPv6 hosts are bracketed"
        );
        let overflow = KvEventsConfig {
            endpoint: "tcp://*:65535".into(),
            ..KvEventsConfig::default()
        };
        assert_eq!(overflow.dial_endpoint("h", 1), None);
    }

    /// The two real 0.5.23 bodies of sglang-0.5.23.md M1: both publishers bind
    /// (`ZmqEventPublisher._socket_setup`), so both are subscribable; the block is read too.
    #[test]
    fn sglang_0_5_23_binds_on_0_0_0_0_and_on_bind_true() {
        let wildcard = json!({
            "page_size": 16,
            "kv_events_config": "{\"publisher\": \"zmq\", \"endpoint\": \"tcp://0.0.0.0:19078\", \"topic\": \"\", \"replay_endpoint\": \"tcp://0.0.0.0:19079\"}",
            "kv_events": {"publisher": "zmq", "endpoint_host": "0.0.0.0", "endpoint_port_base": 19078, "topic": "", "block_size": 16, "dp_size": 1, "replay_endpoint_port_base": 19079}
        });
        let info = WorkerInfo::from_json(&wildcard, None);
        let kv = info.kv_events.as_ref().expect("config");
        assert!(kv.worker_binds(), "0.0.0.0 binds");
        assert_eq!(
            info.kv_events_block.as_ref().map(|b| b.endpoint_port_base),
            Some(19078)
        );
        assert_eq!(info.event_block_size(), 16);

        let explicit = json!({
            "page_size": 16,
            "kv_events_config": "{\"publisher\": \"zmq\", \"endpoint\": \"tcp://127.0.0.1:19088\", \"topic\": \"\", \"replay_endpoint\": \"tcp://127.0.0.1:19089\", \"bind\": true}",
            "kv_events": {"publisher": "zmq", "endpoint_host": "127.0.0.1", "endpoint_port_base": 19088, "topic": "", "block_size": 16, "dp_size": 1, "replay_endpoint_port_base": 19089}
        });
        let info = WorkerInfo::from_json(&explicit, None);
        let kv = info.kv_events.as_ref().expect("config");
        assert_eq!(kv.bind, Some(true));
        assert!(kv.worker_binds(), "bind: true binds a concrete host");
        assert!(info.kv_events_enabled());

        let connect = KvEventsConfig::from_field(&json!(
            r#"{"publisher":"zmq","endpoint":"tcp://*:5557","bind":false}"#
        ))
        .expect("parsed");
        assert!(
            !connect.worker_binds(),
            "bind: false connects even on a wildcard"
        );
    }

    #[test]
    fn block_size_under_dcp_is_the_event_block_size() {
        let info = WorkerInfo::from_json(
            &json!({"page_size": 16, "kv_events": {"publisher": "zmq", "endpoint_host": "*",
                "endpoint_port_base": 5557, "topic": "", "block_size": 64, "dp_size": 1}}),
            None,
        );
        assert_eq!((info.page_size, info.event_block_size()), (16, 64));
        assert!(info.kv_events_enabled(), "the block alone enables events");
        let off = WorkerInfo::from_json(&json!({"page_size": 8, "kv_events": null}), None);
        assert_eq!(
            (off.kv_events_block.as_ref(), off.event_block_size()),
            (None, 8)
        );
    }

    #[test]
    fn incarnation_marker_changes_with_startup_time_or_seed() {
        let a = json!({"startup_time": {"load_weight": 1.5}, "random_seed": 7});
        let b = json!({"startup_time": {"load_weight": 1.6}, "random_seed": 7});
        let c = json!({"startup_time": {"load_weight": 1.5}, "random_seed": 8});
        let ma = incarnation_marker(&a).expect("marker");
        assert_eq!(incarnation_marker(&a.clone()), Some(ma.clone()));
        assert_ne!(incarnation_marker(&b), Some(ma.clone()));
        assert_ne!(incarnation_marker(&c), Some(ma));
        assert_eq!(incarnation_marker(&json!({"page_size": 16})), None);
        assert_eq!(
            incarnation_marker(&json!({"startup_time": null, "random_seed": null})),
            None
        );
        assert!(WorkerInfo::from_json(&a, None).incarnation.is_some());
    }
}
