//! Worker load reports: the one parser of SGLang's `/get_load` answer (and of the
//! `/v1/loads` body), used by the health checker's load polling and by the
//! `GET /get_loads` fan-out, and which of the two routes a worker serves.
//!
//! SGLang 0.5.23 serves `/v1/loads` (`entrypoints/v1_loads.py` `get_loads`:
//! `{"timestamp", "version", "accelerator", "num_accelerators", "loads": [LoadSnapshot.to_dict()
//! per DP rank]}`, each with `dp_rank`, `num_running_reqs`, `num_waiting_reqs`,
//! `num_used_tokens`, `num_total_tokens`, ...; `managers/load_snapshot.py`) and no longer
//! `/get_load`; older versions only `/get_load`. Callers try [`LoadRoute::path`] and, on a
//! 404, the other route once, remembering whichever answered ([`LoadRoute::missing`]).

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;

/// `GET /v1/loads`: SGLang 0.5.23+.
pub(crate) const V1_LOADS: &str = "/v1/loads";
/// `GET /get_load`: older SGLang.
pub(crate) const GET_LOAD: &str = "/get_load";

/// The load route one worker answers, remembered per worker (`/v1/loads` until it 404s).
#[derive(Debug, Default)]
pub struct LoadRoute {
    legacy: AtomicBool,
}

impl LoadRoute {
    /// The route to ask first.
    pub fn path(&self) -> &'static str {
        if self.legacy.load(Ordering::Relaxed) {
            GET_LOAD
        } else {
            V1_LOADS
        }
    }

    /// `path` answered 404: remember the other route and return it (to try once now).
    pub fn missing(&self, path: &str) -> &'static str {
        let legacy = path == V1_LOADS;
        self.legacy.store(legacy, Ordering::Relaxed);
        self.path()
    }
}

/// Token load from a `/get_load` body, summed over DP ranks:
/// - E1: `{"load": n}`;
/// - E2/E3: a per-DP list of `{"num_tokens": n, ...}` (nested lists are summed too),
///   or one such entry on its own;
/// - `/v1/loads`: `{"loads": [...]}` whose entries carry `num_used_tokens`.
///
/// `None` when the body has none of these shapes (or an entry has no token count).
pub fn parse_load(v: &Value) -> Option<i64> {
    match v {
        Value::Array(items) => sum_ranks(items),
        Value::Object(o) => match (o.get("loads"), o.get("load")) {
            (Some(Value::Array(items)), _) => sum_ranks(items),
            (_, Some(load)) => load.as_i64(),
            _ => rank_load(v),
        },
        _ => None,
    }
}

/// Saturating sum of the ranks' loads; `None` if one is unreadable.
fn sum_ranks(items: &[Value]) -> Option<i64> {
    items
        .iter()
        .try_fold(0i64, |acc, it| Some(acc.saturating_add(rank_load(it)?)))
}

/// One DP rank's entry (`num_tokens`, or `num_used_tokens` in `/v1/loads`).
fn rank_load(v: &Value) -> Option<i64> {
    match v {
        Value::Array(items) => sum_ranks(items),
        Value::Object(o) => o
            .get("num_tokens")
            .or_else(|| o.get("num_used_tokens"))
            .and_then(Value::as_i64),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn e1_single_load() {
        assert_eq!(parse_load(&json!({"load": 42})), Some(42));
        assert_eq!(parse_load(&json!({"load": "x"})), None);
    }

    #[test]
    fn per_dp_lists_are_summed() {
        assert_eq!(
            parse_load(
                &json!([{"dp_rank":0,"num_reqs":1,"num_waiting_reqs":0,"num_tokens":10},
                        {"dp_rank":1,"num_reqs":2,"num_waiting_reqs":0,"num_tokens":5}])
            ),
            Some(15)
        );
        assert_eq!(parse_load(&json!([])), Some(0));
        assert_eq!(
            parse_load(&json!([[{"num_tokens": 1}], {"num_tokens": 2}])),
            Some(3),
            "nested lists"
        );
        assert_eq!(
            parse_load(&json!([{"num_tokens": i64::MAX}, {"num_tokens": 1}])),
            Some(i64::MAX),
            "saturates"
        );
    }

    #[test]
    fn one_rank_entry_on_its_own() {
        assert_eq!(
            parse_load(&json!({"dp_rank":0,"num_reqs":1,"num_tokens":7})),
            Some(7)
        );
    }

    #[test]
    fn v1_loads_body() {
        assert_eq!(
            parse_load(&json!({"timestamp":"x","loads":[{"dp_rank":0,"num_used_tokens":7}]})),
            Some(7)
        );
        assert_eq!(
            parse_load(&json!({"loads":[{"num_used_tokens":7},{"num_used_tokens":3}]})),
            Some(10)
        );
    }

    #[test]
    fn unreadable_bodies() {
        assert_eq!(parse_load(&json!([{"dp_rank":0}])), None);
        assert_eq!(parse_load(&json!([{"num_tokens":1}, 3])), None);
        assert_eq!(parse_load(&json!({"dp_rank":0})), None);
        assert_eq!(parse_load(&json!("x")), None);
        assert_eq!(parse_load(&json!(5)), None);
        assert_eq!(parse_load(&Value::Null), None);
    }

    #[test]
    fn load_route_falls_back_and_is_remembered() {
        let r = LoadRoute::default();
        assert_eq!(r.path(), V1_LOADS);
        assert_eq!(r.missing(V1_LOADS), GET_LOAD);
        assert_eq!(r.path(), GET_LOAD, "remembered");
        assert_eq!(
            r.missing(GET_LOAD),
            V1_LOADS,
            "an upgraded worker goes back"
        );
    }

    /// A `/v1/loads` body of the shape `v1_loads.py` returns (one DP rank, core keys).
    #[test]
    fn v1_loads_real_shape() {
        let body = json!({"timestamp": "2026-12-01T10:00:00+00:00", "version": "0.5.23",
            "accelerator": null, "num_accelerators": 1, "loads": [{"timestamp": 1.0, "dp_rank": 0,
            "num_running_reqs": 2, "num_waiting_reqs": 1, "num_waiting_uncached_tokens": 16,
            "num_used_tokens": 336, "num_total_tokens": 352, "num_active_tokens": 352,
            "num_prealloc_ready_tokens": 0, "max_total_num_tokens": 65536, "max_running_requests": 256,
            "token_usage": 0.005, "gen_throughput": 0.0, "cache_hit_rate": 0.0, "utilization": 0.0,
            "total_prefill_uncached_tokens": 0, "total_prefill_busy_us": 0, "decode_moments": null}]});
        assert_eq!(parse_load(&body), Some(336));
    }
}
