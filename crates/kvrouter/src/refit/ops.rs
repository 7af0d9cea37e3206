//! What each SGLang control path means to the router: [`Op`] classifies a path, and
//! [`prepare_bodies`] builds the per-worker bodies (only `/init_weights_update_group`
//! differs per worker: each gets its own `rank_offset`).

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::workers::Worker;

/// The native fan-out paths (`POST /<path>` on the router goes to every eligible worker).
pub const FANOUT_PATHS: &[&str] = &[
    "/pause_generation",
    "/continue_generation",
    "/flush_cache",
    "/update_weights_from_disk",
    "/update_weights_from_distributed",
    "/update_weights_from_tensor",
    "/init_weights_update_group",
    "/destroy_weights_update_group",
    "/update_weight_version",
    "/release_memory_occupation",
    "/resume_memory_occupation",
    "/abort_request",
    "/begin_weight_update",
    "/end_weight_update",
];

/// How the router treats a control call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Close the gate for the targets; `wait` drains router-side and is not forwarded.
    Pause { mode: String },
    /// Forward, then reopen the gate for the targets that succeeded.
    Continue,
    /// Forward; success empties the worker's KV cache.
    Flush,
    /// Forward; success sets the weight version (and empties the cache with `flush_cache`).
    WeightUpdate {
        flush: bool,
        version: Option<String>,
    },
    /// Forward; success sets the version.
    SetVersion { version: Option<String> },
    /// Forward with a per-worker `rank_offset`.
    InitGroup,
    /// Forward; success with `kv_cache` released empties the cache.
    MemoryRelease { kv_cache: bool },
    /// `abort_request` for one rid (only the holder) or `abort_all`.
    Abort { rid: Option<String> },
    /// Anything else: forwarded verbatim.
    Other,
}

fn body_json(body: &[u8]) -> Result<Map<String, Value>, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(_) => Err("request body must be a JSON object".into()),
        Err(e) => Err(format!("request body is not valid JSON: {e}")),
    }
}

fn str_field(m: &Map<String, Value>, k: &str) -> Option<String> {
    match m.get(k) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    }
}

impl Op {
    /// Classifies `path` (with leading slash) and its body; `Err` is a 400 message.
    pub fn classify(path: &str, body: &[u8]) -> Result<Op, String> {
        // Only bodies the router interprets are parsed; anything else is forwarded verbatim.
        let needs_body = matches!(
            path,
            "/pause_generation"
                | "/update_weights_from_disk"
                | "/update_weights_from_distributed"
                | "/update_weights_from_tensor"
                | "/update_weights_from_ipc"
                | "/update_weight_version"
                | "/init_weights_update_group"
                | "/release_memory_occupation"
                | "/abort_request"
        );
        let m = if needs_body {
            body_json(body)?
        } else {
            Map::new()
        };
        Ok(match path {
            "/pause_generation" => {
                let mode = match m.get("mode") {
                    None | Some(Value::Null) => "abort".to_string(),
                    Some(Value::String(s)) => s.clone(),
                    Some(_) => return Err("\"mode\" must be a string".into()),
                };
                if !matches!(mode.as_str(), "wait" | "abort" | "retract" | "in_place") {
                    return Err(format!(
                        "invalid pause mode {mode:?}; expected wait, abort, retract or in_place"
                    ));
                }
                Op::Pause { mode }
            }
            "/continue_generation" => Op::Continue,
            "/flush_cache" => Op::Flush,
            "/update_weights_from_disk"
            | "/update_weights_from_distributed"
            | "/update_weights_from_tensor"
            | "/update_weights_from_ipc" => Op::WeightUpdate {
                flush: m
                    .get("flush_cache")
                    .and_then(Value::as_bool)
                    .unwrap_or(true),
                version: str_field(&m, "weight_version"),
            },
            "/update_weight_version" => Op::SetVersion {
                version: Some(
                    str_field(&m, "new_version")
                        .ok_or("missing required field \"new_version\" (a string)")?,
                ),
            },
            "/init_weights_update_group" => {
                for k in ["master_address", "master_port", "world_size"] {
                    if m.get(k).is_none_or(Value::is_null) {
                        return Err(format!("missing required field {k:?}"));
                    }
                }
                Op::InitGroup
            }
            "/release_memory_occupation" => Op::MemoryRelease {
                kv_cache: match m.get("tags") {
                    None | Some(Value::Null) => true,
                    Some(Value::Array(t)) if t.is_empty() => true,
                    Some(Value::Array(t)) => t.iter().any(|t| t.as_str() == Some("kv_cache")),
                    Some(_) => return Err("\"tags\" must be a list of strings".into()),
                },
            },
            "/abort_request" => {
                let all = m.get("abort_all").and_then(Value::as_bool).unwrap_or(false);
                let rid = str_field(&m, "rid").filter(|r| !r.is_empty());
                if !all && rid.is_none() {
                    return Err("abort_request needs \"rid\" or \"abort_all\": true".into());
                }
                Op::Abort {
                    rid: if all { None } else { rid },
                }
            }
            _ => Op::Other,
        })
    }

    /// Whether a successful call empties the worker's KV cache (and why).
    pub fn clears_cache(&self) -> Option<super::ClearReason> {
        use super::ClearReason;
        match self {
            Op::Flush => Some(ClearReason::Flush),
            Op::WeightUpdate { flush: true, .. } => Some(ClearReason::WeightUpdate),
            Op::MemoryRelease { kv_cache: true } => Some(ClearReason::MemoryRelease),
            _ => None,
        }
    }

    /// Whether a successful call changes the weight version.
    pub fn changes_version(&self) -> bool {
        matches!(self, Op::WeightUpdate { .. } | Op::SetVersion { .. })
    }
}

/// One worker's slot in the NCCL weight-update group.
#[derive(Debug, Clone)]
pub(crate) struct RankSlot {
    pub worker: Arc<Worker>,
    pub rank_offset: u64,
    pub gpus: u64,
}

/// Assigns `rank_offset`s in `targets` order (the caller sorts them stably): the first gets
/// `base`, each next one the previous offset plus the previous worker's GPU count.
pub(crate) fn assign_ranks(targets: &[Arc<Worker>], base: u64) -> Vec<RankSlot> {
    let mut next = base;
    targets
        .iter()
        .map(|w| {
            let gpus = u64::from(w.info.gpu_count().max(1));
            let slot = RankSlot {
                worker: w.clone(),
                rank_offset: next,
                gpus,
            };
            next += gpus;
            slot
        })
        .collect()
}

/// The body each target receives, in `targets` order. For `/init_weights_update_group` the
/// caller's `rank_offset` (default 1: the trainer is rank 0) is the base of the assignment;
/// `world_size` must cover every assigned rank.
pub(crate) fn prepare_bodies(
    op: &Op,
    targets: &[Arc<Worker>],
    body: &Bytes,
) -> Result<(Vec<Bytes>, Option<Value>), String> {
    if *op != Op::InitGroup {
        return Ok((vec![body.clone(); targets.len()], None));
    }
    let m = body_json(body)?;
    let base = match m.get("rank_offset") {
        None | Some(Value::Null) => 1,
        Some(v) => v
            .as_u64()
            .ok_or("\"rank_offset\" must be a non-negative integer")?,
    };
    let world = m
        .get("world_size")
        .and_then(Value::as_u64)
        .ok_or("\"world_size\" must be a positive integer")?;
    let slots = assign_ranks(targets, base);
    let needed = slots.last().map_or(base, |s| s.rank_offset + s.gpus);
    if world < needed {
        return Err(format!(
            "world_size {world} is too small: {} workers with {} GPUs from rank_offset {base} need world_size >= {needed}",
            slots.len(),
            needed - base
        ));
    }
    let mut bodies = Vec::with_capacity(slots.len());
    for s in &slots {
        let mut b = m.clone();
        b.insert("rank_offset".into(), json!(s.rank_offset));
        bodies.push(Bytes::from(Value::Object(b).to_string()));
    }
    let report = json!({
        "base_rank_offset": base,
        "world_size": world,
        "world_size_needed": needed,
        "ranks": slots.iter().map(|s| json!({
            "worker_id": s.worker.public_id, "url": s.worker.url,
            "rank_offset": s.rank_offset, "gpus": s.gpus,
        })).collect::<Vec<_>>(),
    });
    Ok((bodies, Some(report)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::{WorkerId, WorkerInfo};

    fn worker(id: u32, tp: u32) -> Arc<Worker> {
        let info = WorkerInfo {
            tp_size: tp,
            ..WorkerInfo::default()
        };
        Arc::new(Worker::new(WorkerId(id), &format!("http://h:{id}"), info))
    }

    #[test]
    fn classify_paths_and_bodies() {
        assert_eq!(
            Op::classify("/pause_generation", br#"{"mode":"retract"}"#),
            Ok(Op::Pause {
                mode: "retract".into()
            })
        );
        assert_eq!(
            Op::classify("/pause_generation", b""),
            Ok(Op::Pause {
                mode: "abort".into()
            })
        );
        assert!(Op::classify("/pause_generation", br#"{"mode":"nap"}"#).is_err());
        assert_eq!(
            Op::classify("/update_weights_from_disk", br#"{"model_path":"/m"}"#),
            Ok(Op::WeightUpdate {
                flush: true,
                version: None
            })
        );
        let op = Op::classify(
            "/update_weights_from_distributed",
            br#"{"flush_cache":false,"weight_version":"7"}"#,
        )
        .expect("ok");
        assert_eq!(op.clears_cache(), None);
        assert!(op.changes_version());
        assert!(Op::classify("/update_weight_version", b"{}").is_err());
        assert_eq!(
            Op::classify("/release_memory_occupation", br#"{"tags":["weights"]}"#)
                .expect("ok")
                .clears_cache(),
            None
        );
        assert_eq!(
            Op::classify("/abort_request", br#"{"rid":"a","abort_all":false}"#),
            Ok(Op::Abort {
                rid: Some("a".into())
            })
        );
        assert!(Op::classify("/abort_request", b"{}").is_err());
        assert!(Op::classify("/update_weights_from_disk", b"[1]").is_err());
        assert_eq!(Op::classify("/flush_cache", b"junk"), Ok(Op::Flush));
        assert_eq!(
            Op::classify("/load_lora_adapter", b"not json"),
            Ok(Op::Other),
            "unknown paths are forwarded verbatim"
        );
    }

    #[test]
    fn rank_offsets_follow_gpu_counts() {
        let ws = vec![worker(1, 2), worker(2, 1), worker(3, 4)];
        let body = Bytes::from_static(
            br#"{"master_address":"127.0.0.1","master_port":29500,"rank_offset":1,"world_size":8,"group_name":"g"}"#,
        );
        let (bodies, report) = prepare_bodies(&Op::InitGroup, &ws, &body).expect("ok");
        let offsets: Vec<u64> = bodies
            .iter()
            .map(|b| {
                serde_json::from_slice::<Value>(b).expect("json")["rank_offset"]
                    .as_u64()
                    .expect("n")
            })
            .collect();
        assert_eq!(offsets, vec![1, 3, 4]);
        let report = report.expect("report");
        assert_eq!(report["world_size_needed"], 8);
        assert_eq!(report["ranks"][2]["gpus"], 4);
        let small = Bytes::from_static(
            br#"{"master_address":"a","master_port":1,"rank_offset":1,"world_size":7}"#,
        );
        let err = prepare_bodies(&Op::InitGroup, &ws, &small).expect_err("too small");
        assert!(err.contains("world_size >= 8"), "{err}");
    }
}
