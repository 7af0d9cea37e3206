//! Body surgery for the two legs: SGLang's bootstrap fields (`bootstrap_host`,
//! `bootstrap_port`, `bootstrap_room`, arrays for a batch) and the DP-rank fields, inserted
//! before the closing `}` of the client's bytes. Nothing else changes: the body is not
//! re-serialized, so every other byte reaches both workers as the client sent it.

use bytes::{Bytes, BytesMut};
use rand::Rng;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::routing::{Endpoint, RoutingInput};

/// Rooms are drawn below this, so SGLang's `room + i` for a scalar room and `n` samples
/// (`io_struct.py` `_normalize_batch_inputs`) stays below 2^63.
const ROOM_LIMIT: u64 = (1 << 63) - (1 << 20);

/// The top-level fields of a body the PD legs need (serde, borrowed; other keys skipped).
#[derive(Deserialize, Default)]
#[serde(default)]
struct Probe<'a> {
    n: Option<u64>,
    return_logprob: Option<bool>,
    #[serde(borrow)]
    routed_dp_rank: Option<&'a RawValue>,
}

/// What [`BodyFacts::read`] found in a request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BodyFacts {
    /// Rooms to send: 1 for a single prompt, else one per prompt (or per chat choice).
    pub rooms: usize,
    /// The bootstrap fields are arrays (a batch, or chat `n > 1`).
    pub batch: bool,
    /// `return_logprob: true`: the prefill's input logprobs are merged into the decode's.
    pub return_logprob: bool,
    /// The client named a DP rank (`routed_dp_rank`): no rank field is injected.
    pub has_rank: bool,
}

impl BodyFacts {
    /// Reads the facts of `body` (already parsed as `input`): batches as sgl-router and SMG
    /// count them (`get_*_batch_size`): a batched `input_ids` or `text` on `/generate`, an array
    /// `prompt` of strings or token lists on `/v1/completions`, `n > 1` on chat.
    pub(crate) fn read(input: &RoutingInput<'_>, body: &[u8]) -> BodyFacts {
        let probe: Probe<'_> = serde_json::from_slice(body).unwrap_or_default();
        let (rooms, batch) = match input.endpoint {
            Endpoint::ChatCompletions => match probe.n {
                Some(n) if n > 1 => (n.min(1 << 16) as usize, true),
                _ => (1, false),
            },
            Endpoint::Generate | Endpoint::Completions if input.is_batch() => {
                (input.batch_size.max(1), true)
            }
            _ => (1, false),
        };
        BodyFacts {
            rooms,
            batch,
            return_logprob: probe.return_logprob == Some(true),
            has_rank: probe.routed_dp_rank.is_some_and(|r| r.get() != "null"),
        }
    }
}

/// Random bootstrap rooms, one per prompt.
pub(crate) fn new_rooms(n: usize) -> Vec<u64> {
    let mut rng = rand::rng();
    (0..n.max(1))
        .map(|_| rng.random_range(0..ROOM_LIMIT))
        .collect()
}

/// Makes every room congruent to `rank` modulo `dp_size`, so the prefill's DP rank follows
/// from its room as well as from `routed_dp_rank`. SGLang before `routed_dp_rank` existed
/// (0.5.9) drops that field and `disagg_prefill_dp_rank` (unknown keys): its PD prefill places
/// a request on rank `bootstrap_room % dp_size` (load balance `follow_bootstrap_room`, the
/// prefill's default) and its decode looks for the KV on the same rank
/// (`disaggregation/common/conn.py`), so an aligned room lands the request on the rank the
/// policy chose there too; on newer SGLang the explicit fields agree with it.
pub(crate) fn align_rooms(rooms: &mut [u64], rank: u32, dp_size: u32) {
    let dp = u64::from(dp_size.max(1));
    let rank = u64::from(rank) % dp;
    for room in rooms.iter_mut() {
        let mut r = *room - *room % dp + rank;
        if r >= ROOM_LIMIT {
            r -= dp;
        }
        *room = r;
    }
}

/// The prefill worker's address as the decode worker dials it: its host, IPv6 in brackets.
pub(crate) fn bootstrap_host(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// The bootstrap fields both legs get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bootstrap {
    pub host: String,
    pub port: Option<u16>,
    pub rooms: Vec<u64>,
    pub batch: bool,
}

impl Bootstrap {
    /// `,"bootstrap_host":…,"bootstrap_port":…,"bootstrap_room":…` (scalars, or arrays of
    /// `rooms.len()` for a batch).
    fn fields(&self, out: &mut String) {
        let host = serde_json::Value::String(self.host.clone()).to_string();
        let port = self.port.map_or("null".to_string(), |p| p.to_string());
        let repeat = |v: &str| {
            if self.batch {
                format!("[{}]", vec![v; self.rooms.len()].join(","))
            } else {
                v.to_string()
            }
        };
        let rooms: Vec<String> = self.rooms.iter().map(u64::to_string).collect();
        let room = if self.batch {
            format!("[{}]", rooms.join(","))
        } else {
            rooms.first().cloned().unwrap_or_else(|| "0".into())
        };
        out.push_str(&format!(
            "\"bootstrap_host\":{},\"bootstrap_port\":{},\"bootstrap_room\":{room}",
            repeat(&host),
            repeat(&port)
        ));
    }
}

/// `body` with the bootstrap fields and `extra` (`(name, value)`, e.g. DP ranks) inserted
/// before its last `}`; `None` when the body is not an object.
pub(crate) fn splice(body: &[u8], bootstrap: &Bootstrap, extra: &[(&str, u32)]) -> Option<Bytes> {
    let end = body.iter().rposition(|b| *b == b'}')?;
    let inner_empty = body[..end]
        .iter()
        .rev()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{');
    let mut fields = String::with_capacity(96 + 24 * bootstrap.rooms.len());
    if !inner_empty {
        fields.push(',');
    }
    bootstrap.fields(&mut fields);
    for (name, value) in extra {
        fields.push_str(&format!(",\"{name}\":{value}"));
    }
    let mut out = BytesMut::with_capacity(body.len() + fields.len());
    out.extend_from_slice(&body[..end]);
    out.extend_from_slice(fields.as_bytes());
    out.extend_from_slice(&body[end..]);
    Some(out.freeze())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn facts(endpoint: Endpoint, body: &str) -> BodyFacts {
        let input = RoutingInput::parse(endpoint, body.as_bytes()).unwrap();
        BodyFacts::read(&input, body.as_bytes())
    }

    #[test]
    fn batches_as_the_peers_count_them() {
        let g = |b| facts(Endpoint::Generate, b);
        assert_eq!(g(r#"{"input_ids":[1,2,3]}"#).rooms, 1);
        assert!(!g(r#"{"input_ids":[1,2,3]}"#).batch);
        let b = g(r#"{"input_ids":[[1,2],[3],[4]],"return_logprob":true}"#);
        assert_eq!((b.rooms, b.batch, b.return_logprob), (3, true, true));
        assert_eq!(g(r#"{"text":["a","b"]}"#).rooms, 2);
        assert!(!g(r#"{"text":"a","sampling_params":{"n":4}}"#).batch);
        let c = |b| facts(Endpoint::Completions, b);
        assert_eq!(c(r#"{"prompt":["a","b"]}"#).rooms, 2);
        assert!(!c(r#"{"prompt":[1,2,3]}"#).batch);
        let chat = |b: &str| facts(Endpoint::ChatCompletions, b);
        let m = r#""messages":[{"role":"user","content":"hi"}]"#;
        assert_eq!(chat(&format!("{{{m},\"n\":3}}")).rooms, 3);
        assert!(!chat(&format!("{{{m},\"n\":1}}")).batch);
        assert!(g(r#"{"input_ids":[1],"routed_dp_rank":1}"#).has_rank);
        assert!(!g(r#"{"input_ids":[1],"routed_dp_rank":null}"#).has_rank);
    }

    #[test]
    fn splices_before_the_closing_brace_only() {
        let body = br#"{"input_ids":[1,2], "x":{"y":"}"}}  "#;
        let b = Bootstrap {
            host: bootstrap_host("::1"),
            port: Some(8998),
            rooms: vec![7],
            batch: false,
        };
        let out = splice(body, &b, &[("routed_dp_rank", 1)]).unwrap();
        let added = r#","bootstrap_host":"[::1]","bootstrap_port":8998,"bootstrap_room":7,"routed_dp_rank":1"#;
        let end = body.len() - 3;
        assert_eq!(&out[..end], &body[..end]);
        assert_eq!(&out[end..end + added.len()], added.as_bytes());
        assert_eq!(&out[end + added.len()..], &body[end..]);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["x"]["y"], "}");
        let batch = Bootstrap {
            host: "10.0.0.1".into(),
            port: None,
            rooms: vec![1, 2],
            batch: true,
        };
        let out = splice(b"{ }", &batch, &[]).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{ "bootstrap_host":["10.0.0.1","10.0.0.1"],"bootstrap_port":[null,null],"bootstrap_room":[1,2]}"#
        );
        assert!(splice(b"[1]", &batch, &[]).is_none());
    }

    #[test]
    fn rooms_are_distinct_and_below_2_63() {
        let rooms = new_rooms(64);
        assert!(rooms.iter().all(|r| *r < 1 << 63));
        let mut sorted = rooms.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 64);
        assert_eq!(bootstrap_host("10.1.2.3"), "10.1.2.3");
        assert_eq!(bootstrap_host("fe80::1"), "[fe80::1]");
    }

    #[test]
    fn rooms_aligned_to_the_prefill_rank() {
        let mut rooms = vec![0, 7, 10, ROOM_LIMIT - 1, ROOM_LIMIT - 2];
        align_rooms(&mut rooms, 1, 4);
        for r in &rooms {
            assert_eq!(r % 4, 1, "{rooms:?}");
            assert!(*r < ROOM_LIMIT);
        }
        assert_eq!(&rooms[..3], &[1, 5, 9]);
        let mut one = vec![12345];
        align_rooms(&mut one, 0, 1);
        assert_eq!(one, vec![12345], "dp_size 1 leaves the room");
    }
}
