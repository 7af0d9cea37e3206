//! `GET /v1/loads` as SGLang 0.5.23 serves it (`entrypoints/v1_loads.py::get_loads`): per
//! DP rank a `LoadSnapshot.to_dict(include)` (`managers/load_snapshot.py`; the values as
//! `SchedulerLoadInquirer.get_loads` fills them, `scheduler_components/load_inquirer.py`),
//! wrapped in `{timestamp, version, accelerator, num_accelerators, loads}`, or the
//! Prometheus text of `_format_loads_prometheus`. An unknown `include` section is a 400
//! `{"detail": "Invalid include sections: ..."}` (FastAPI's `HTTPException`).

use std::collections::{BTreeSet, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

use http::StatusCode;
use serde_json::{json, Map, Value};

use super::respond::{json, ok, text, Resp};
use crate::mock::engine::LoadView;
use crate::mock::load::publisher::{reading, RankConst};
use crate::mock::state::MockState;

/// `LoadSnapshot.VALID_SECTIONS`, sorted as Python's `sorted()` prints them.
const VALID_SECTIONS: [&str; 7] = ["all", "core", "disagg", "lora", "memory", "queues", "spec"];

/// Python's `round(x, digits)` for the values SGLang rounds.
fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

/// The core (flat) keys of one rank's snapshot, in `LoadSnapshot` field order.
fn core(rank: u32, v: &LoadView, state: &MockState, ts: f64) -> Vec<(&'static str, Value)> {
    let a = &state.args;
    let stat = reading(
        v,
        RankConst {
            rank,
            max_total_num_tokens: a.max_total_tokens,
            max_running_requests: a.max_running(),
        },
    );
    let usage = v.snap.used_tokens as f64 / a.max_total_tokens.max(1) as f64;
    vec![
        ("timestamp", json!(ts)),
        ("dp_rank", json!(rank)),
        ("num_running_reqs", json!(stat.num_running_reqs)),
        ("num_waiting_reqs", json!(stat.num_waiting_reqs)),
        (
            "num_waiting_uncached_tokens",
            json!(stat.num_waiting_uncached_tokens),
        ),
        ("num_used_tokens", json!(stat.num_tokens)),
        ("num_total_tokens", json!(stat.num_total_tokens)),
        ("num_active_tokens", json!(stat.num_total_tokens)),
        ("num_prealloc_ready_tokens", json!(0)),
        ("max_total_num_tokens", json!(a.max_total_tokens)),
        ("max_running_requests", json!(a.max_running())),
        ("token_usage", json!(round(usage, 4))),
        ("gen_throughput", json!(round(v.gen_throughput, 2))),
        ("cache_hit_rate", json!(round(v.snap.last_hit_rate, 4))),
        ("utilization", json!(round(usage, 4))),
        ("total_prefill_uncached_tokens", json!(0)),
        ("total_prefill_busy_us", json!(0)),
        ("decode_moments", Value::Null),
    ]
}

/// The sections SGLang's scheduler sets: `memory`, `disaggregation` and `queues` always,
/// `lora` with LoRA enabled, `speculative` never (no speculative decoding).
fn sections(
    rank: u32,
    v: &LoadView,
    state: &MockState,
    lora: bool,
) -> Vec<(&'static str, &'static str, Value)> {
    let mut out = vec![(
        "memory",
        "memory",
        json!({"weight_gb": 0.0, "kv_cache_gb": 0.0, "graph_gb": 0.0,
               "token_capacity": state.args.max_total_tokens}),
    )];
    if lora {
        out.push((
            "lora",
            "lora",
            json!({"slots_used": 0, "slots_total": 0, "utilization": 0.0}),
        ));
    }
    out.push((
        "disaggregation",
        "disagg",
        state.pd.load_section(rank as usize),
    ));
    out.push((
        "queues",
        "queues",
        json!({"waiting": v.snap.waiting, "grammar": 0, "paused": 0, "retracted": 0,
               "prealloc_ready": 0}),
    ));
    out
}

/// `LoadSnapshot.to_dict(include)` of one rank, as ordered (key, value) pairs.
fn to_dict(
    rank: u32,
    v: &LoadView,
    state: &MockState,
    include: Option<&BTreeSet<String>>,
    ts: f64,
    lora: bool,
) -> Vec<(&'static str, Value)> {
    let mut d = core(rank, v, state, ts);
    let all = include.is_none_or(|i| i.contains("all"));
    if !all && include.is_some_and(|i| i.len() == 1 && i.contains("core")) {
        return d;
    }
    for (field, name, value) in sections(rank, v, state, lora) {
        if all || include.is_some_and(|i| i.contains(name)) {
            d.push((field, value));
        }
    }
    d
}

/// Python's `repr` of a number as the Prometheus formatter prints it.
fn py_num(v: &Value) -> Option<String> {
    if let Some(i) = v.as_i64() {
        return Some(i.to_string());
    }
    v.as_f64().map(|f| format!("{f:?}"))
}

fn prometheus(per_rank: &[(u32, Vec<(&'static str, Value)>)]) -> String {
    let mut names: Vec<String> = Vec::new();
    let mut samples: HashMap<String, Vec<(u32, String)>> = HashMap::new();
    let mut add = |name: String, rank: u32, val: String| {
        if !samples.contains_key(&name) {
            names.push(name.clone());
        }
        samples.entry(name).or_default().push((rank, val));
    };
    for (rank, d) in per_rank {
        for (key, value) in d {
            if *key == "dp_rank" {
                continue;
            }
            if let Value::Object(m) = value {
                let prefix = match *key {
                    "speculative" => "spec",
                    "disaggregation" => "disagg",
                    k => k,
                };
                for (sub, sv) in m {
                    if let Some(x) = py_num(sv) {
                        add(format!("sglang_{prefix}_{sub}"), *rank, x);
                    }
                }
            } else if let Some(x) = py_num(value) {
                add(format!("sglang_{key}"), *rank, x);
            }
        }
    }
    let mut lines = Vec::new();
    for name in names {
        lines.push(format!("# TYPE {name} gauge"));
        for (rank, val) in &samples[&name] {
            lines.push(format!("{name}{{dp_rank=\"{rank}\"}} {val}"));
        }
    }
    lines.join("\n") + "\n"
}

/// `GET /v1/loads?dp_rank=&include=&format=json|prometheus`.
pub fn v1_loads(state: &MockState, query: Option<&str>) -> Resp {
    let q: HashMap<String, String> = url::form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .into_owned()
        .collect();
    let include: Option<BTreeSet<String>> = q
        .get("include")
        .filter(|s| !s.is_empty())
        .map(|s| s.split(',').map(|p| p.trim().to_string()).collect());
    if let Some(inc) = &include {
        let bad: Vec<String> = inc
            .iter()
            .filter(|s| !VALID_SECTIONS.contains(&s.as_str()))
            .map(|s| format!("'{s}'"))
            .collect();
        if !bad.is_empty() {
            let valid: Vec<String> = VALID_SECTIONS.iter().map(|s| format!("'{s}'")).collect();
            let detail = format!(
                "Invalid include sections: {{{}}}. Valid options: [{}]",
                bad.join(", "),
                valid.join(", ")
            );
            return json(StatusCode::BAD_REQUEST, &json!({ "detail": detail }));
        }
    }
    let dp_filter = match q.get("dp_rank").map(|s| s.parse::<u32>()) {
        None => None,
        Some(Ok(r)) => Some(r),
        Some(Err(_)) => {
            return json(
                StatusCode::UNPROCESSABLE_ENTITY,
                &json!({"detail": [{"type": "int_parsing", "loc": ["query", "dp_rank"],
                    "msg": "Input should be a valid integer, unable to parse string as an integer"}]}),
            )
        }
    };
    let lora = state.adapters.enabled;
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let per_rank: Vec<(u32, Vec<(&'static str, Value)>)> = state
        .views()
        .into_iter()
        .filter(|(r, _)| dp_filter.is_none_or(|f| f == *r))
        .map(|(rank, v)| (rank, to_dict(rank, &v, state, include.as_ref(), ts, lora)))
        .collect();
    if q.get("format").map(String::as_str) == Some("prometheus") {
        return text(StatusCode::OK, prometheus(&per_rank));
    }
    let loads: Vec<Value> = per_rank
        .into_iter()
        .map(|(_, d)| {
            Value::Object(
                d.into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect::<Map<_, _>>(),
            )
        })
        .collect();
    ok(&json!({
        "timestamp": iso_utc(ts),
        "version": super::info::version_of(state),
        "accelerator": "mock",
        "num_accelerators": state.args.tp_size,
        "loads": loads,
    }))
}

/// `datetime.now(timezone.utc).isoformat()`: `YYYY-MM-DDTHH:MM:SS.ffffff+00:00`.
fn iso_utc(ts: f64) -> String {
    let secs = ts.floor() as i64;
    let micros = ((ts - secs as f64) * 1e6) as i64;
    // Civil-from-days (Howard Hinnant) for a dependency-free UTC timestamp.
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}+00:00",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_matches_python() {
        // datetime.fromtimestamp(1764700200.5, timezone.utc).isoformat()
        assert_eq!(iso_utc(1_764_700_200.5), "2025-12-02T18:30:00.500000+00:00");
    }
}
