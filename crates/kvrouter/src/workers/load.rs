//! Worker load reports: the one parser of SGLang's `/get_load` answer (and of the
//! `/v1/loads` body), used by the health checker's load polling and by the
//! `GET /get_loads` fan-out.

use serde_json::Value;

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
}
