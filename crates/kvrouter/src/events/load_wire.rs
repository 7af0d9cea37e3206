//! Decoder of SGLang's load publisher payload (`LoadStat`, 0.5.23+).
//!
//! Source: `sglang/srt/managers/scheduler_components/load_publisher.py` `LoadStat`: a msgspec
//! struct with `tag=True, array_like=True` and no `omit_defaults`, so the wire form is a
//! msgpack array with the tag first: `["LoadStat", num_running_reqs, num_waiting_reqs,
//! num_tokens, max_total_num_tokens, attn_dp_rank, num_waiting_uncached_tokens,
//! num_total_tokens, max_running_requests, total_prefill_uncached_tokens,
//! total_prefill_busy_us]`. The first six are the older (#34608) prefix; later positions are
//! read when present and default to 0 ("current routers ignore appended fields", so extra
//! trailing values are ignored here too). Frames on the socket: `[b"load", seq (8 B
//! big-endian), payload]`, one PUB per DP rank.
//!
//! Malformed input is an error, never a panic.

use rmpv::Value;

/// The tag of a load report.
pub(crate) const LOAD_STAT_TAG: &str = "LoadStat";

/// One rank's load as its scheduler reported it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadStat {
    pub num_running_reqs: u64,
    pub num_waiting_reqs: u64,
    /// KV tokens in use.
    pub num_tokens: u64,
    /// KV capacity (0 when unknown).
    pub max_total_num_tokens: u64,
    pub attn_dp_rank: Option<u64>,
    /// Uncached prompt tokens waiting for prefill.
    pub num_waiting_uncached_tokens: u64,
    /// KV tokens in use plus the tokens of queued requests.
    pub num_total_tokens: u64,
    pub max_running_requests: u64,
    pub total_prefill_uncached_tokens: u64,
    pub total_prefill_busy_us: u64,
}

/// Why a load payload could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LoadDecodeError {
    #[error("not msgpack: {0}")]
    Msgpack(String),
    #[error("load stat must be an array [\"LoadStat\", running, waiting, tokens, capacity, ...]")]
    NotArray,
    #[error("unexpected tag {0:?} (want \"LoadStat\")")]
    Tag(String),
    #[error("field {0} is not a non-negative integer")]
    Field(usize),
}

/// Decodes one `LoadStat` payload.
pub(crate) fn decode_load_stat(payload: &[u8]) -> Result<LoadStat, LoadDecodeError> {
    let mut rd = payload;
    let v =
        rmpv::decode::read_value(&mut rd).map_err(|e| LoadDecodeError::Msgpack(e.to_string()))?;
    let Value::Array(items) = v else {
        return Err(LoadDecodeError::NotArray);
    };
    match items.first().and_then(Value::as_str) {
        Some(LOAD_STAT_TAG) => {}
        Some(other) => return Err(LoadDecodeError::Tag(other.to_string())),
        None => return Err(LoadDecodeError::NotArray),
    }
    if items.len() < 5 {
        return Err(LoadDecodeError::NotArray);
    }
    // Position i of the struct is items[i + 1]; the first four are required.
    let required = |i: usize| -> Result<u64, LoadDecodeError> {
        items
            .get(i + 1)
            .and_then(Value::as_u64)
            .ok_or(LoadDecodeError::Field(i))
    };
    let optional = |i: usize| -> Result<u64, LoadDecodeError> {
        match items.get(i + 1) {
            None | Some(Value::Nil) => Ok(0),
            Some(v) => v.as_u64().ok_or(LoadDecodeError::Field(i)),
        }
    };
    Ok(LoadStat {
        num_running_reqs: required(0)?,
        num_waiting_reqs: required(1)?,
        num_tokens: required(2)?,
        max_total_num_tokens: required(3)?,
        attn_dp_rank: match items.get(5) {
            None | Some(Value::Nil) => None,
            Some(v) => Some(v.as_u64().ok_or(LoadDecodeError::Field(4))?),
        },
        num_waiting_uncached_tokens: optional(5)?,
        num_total_tokens: optional(6)?,
        max_running_requests: optional(7)?,
        total_prefill_uncached_tokens: optional(8)?,
        total_prefill_busy_us: optional(9)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap_or(0))
            .collect()
    }

    /// The payload SGLang 0.5.23 published while idle (sglang-0.5.23.md, "Load publisher").
    #[test]
    fn real_idle_payload() {
        let stat = decode_load_stat(&hex(
            "9ba84c6f6164537461740000cd0150ce000100000000cd0150cd01000000",
        ))
        .expect("decodes");
        assert_eq!(
            stat,
            LoadStat {
                num_tokens: 336,
                max_total_num_tokens: 65536,
                attn_dp_rank: Some(0),
                num_total_tokens: 336,
                max_running_requests: 256,
                ..LoadStat::default()
            }
        );
    }

    fn encode(v: Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, &v).unwrap_or(());
        out
    }

    #[test]
    fn older_six_field_prefix_and_extra_fields() {
        let six = encode(Value::Array(vec![
            Value::from("LoadStat"),
            Value::from(3),
            Value::from(2),
            Value::from(100),
            Value::from(1000),
            Value::Nil,
        ]));
        let s = decode_load_stat(&six).expect("prefix");
        assert_eq!(
            (s.num_running_reqs, s.num_waiting_reqs, s.attn_dp_rank),
            (3, 2, None)
        );
        let mut long: Vec<Value> = vec![Value::from("LoadStat")];
        long.extend((1..=12).map(Value::from));
        let s = decode_load_stat(&encode(Value::Array(long))).expect("appended fields ignored");
        assert_eq!((s.num_running_reqs, s.total_prefill_busy_us), (1, 10));
    }

    #[test]
    fn malformed_payloads_are_errors() {
        assert!(matches!(
            decode_load_stat(b""),
            Err(LoadDecodeError::Msgpack(_))
        ));
        assert_eq!(
            decode_load_stat(&encode(Value::from(1))),
            Err(LoadDecodeError::NotArray)
        );
        assert_eq!(
            decode_load_stat(&encode(Value::Array(vec![
                Value::from("BlockStored"),
                Value::from(1)
            ]))),
            Err(LoadDecodeError::Tag("BlockStored".into()))
        );
        assert_eq!(
            decode_load_stat(&encode(Value::Array(vec![
                Value::from("LoadStat"),
                Value::from(1)
            ]))),
            Err(LoadDecodeError::NotArray)
        );
        let negative = encode(Value::Array(vec![
            Value::from("LoadStat"),
            Value::from(-1),
            Value::from(0),
            Value::from(0),
            Value::from(0),
        ]));
        assert_eq!(decode_load_stat(&negative), Err(LoadDecodeError::Field(0)));
    }
}
