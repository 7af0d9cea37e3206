//! `KvEventsBlock`: the `kv_events` block SGLang (0.5.23+) puts in `/server_info` to tell
//! routers where to subscribe, parsed tolerantly, and the per-rank endpoints it names.
//!
//! Source: `sglang/srt/runtime_context.py` `describe_kv_events_publisher` (called from
//! `sglang/srt/utils/common.py` `build_server_info`): `publisher`, `endpoint_host` (may be a
//! ZMQ wildcard `*`, `0.0.0.0`, `::`: subscribers substitute the worker URL's host),
//! `endpoint_port_base` (rank r publishes on base + r), `topic`, `block_size`
//! (`kv_event_block_size_of`: the page size, times the DCP size under DCP), `dp_size` (number of
//! SUB sockets), and optionally `replay_endpoint_port_base` (ROUTER, same rank and host rule),
//! `load_endpoint_port_base` + `load_topic` (the opt-in load publisher, same rank and host rule).
//! The block is `null` when publishing is off or the endpoint is not advertisable TCP.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The `kv_events` block of one worker's `/server_info` (see module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvEventsBlock {
    /// `"zmq"` (SGLang advertises no block for `"null"`).
    pub publisher: String,
    /// Host of the PUB sockets as configured (a wildcard means the worker URL's host).
    pub endpoint_host: String,
    /// PUB port of rank 0; rank r publishes on base + r.
    pub endpoint_port_base: u16,
    /// Topic frame (empty: subscribe to all).
    pub topic: String,
    /// Tokens per published block (page size x DCP size).
    pub block_size: Option<u32>,
    /// Number of DP ranks publishing (one PUB socket each).
    pub dp_size: Option<u32>,
    /// ROUTER replay port of rank 0, when replay is configured over TCP.
    pub replay_endpoint_port_base: Option<u16>,
    /// Load publisher port of rank 0, when `--load-publish-endpoint` is on.
    pub load_endpoint_port_base: Option<u16>,
    /// Topic frame of the load publisher (`"load"`), present with its port.
    pub load_topic: Option<String>,
}

impl KvEventsBlock {
    /// Parses the `kv_events` value: `None` for null, a non-object, or an object without a
    /// usable `endpoint_host` and `endpoint_port_base` (then the router falls back to the
    /// `kv_events_config` string).
    pub fn from_field(v: &Value) -> Option<KvEventsBlock> {
        let o = v.as_object()?;
        let endpoint_host = string(o, "endpoint_host")?;
        let endpoint_port_base = port(o, "endpoint_port_base")?;
        Some(KvEventsBlock {
            publisher: string(o, "publisher").unwrap_or_else(|| "zmq".to_string()),
            endpoint_host,
            endpoint_port_base,
            topic: o
                .get("topic")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            block_size: positive(o, "block_size"),
            dp_size: positive(o, "dp_size"),
            replay_endpoint_port_base: port(o, "replay_endpoint_port_base"),
            load_endpoint_port_base: port(o, "load_endpoint_port_base"),
            load_topic: string(o, "load_topic"),
        })
    }

    /// True when the block describes a ZMQ publisher.
    pub fn is_zmq(&self) -> bool {
        self.publisher.eq_ignore_ascii_case("zmq")
    }

    /// PUB endpoint of `rank` (host rule above); `None` when the port overflows.
    pub fn endpoint(&self, worker_host: &str, rank: u32) -> Option<String> {
        rank_endpoint(
            &self.endpoint_host,
            self.endpoint_port_base,
            worker_host,
            rank,
        )
    }

    /// ROUTER replay endpoint of `rank`, when advertised.
    pub fn replay_endpoint(&self, worker_host: &str, rank: u32) -> Option<String> {
        let base = self.replay_endpoint_port_base?;
        rank_endpoint(&self.endpoint_host, base, worker_host, rank)
    }

    /// Load publisher endpoint of `rank`, when advertised. SGLang binds the load range on the
    /// KV endpoint's (wildcard) host; the docstring says to pair it with the worker URL's host.
    pub fn load_endpoint(&self, worker_host: &str, rank: u32) -> Option<String> {
        let base = self.load_endpoint_port_base?;
        rank_endpoint(&self.endpoint_host, base, worker_host, rank)
    }
}

/// `tcp://HOST:BASE+rank`, a wildcard host replaced by `worker_host` (bracketed if IPv6).
fn rank_endpoint(host: &str, base: u16, worker_host: &str, rank: u32) -> Option<String> {
    let port = u32::from(base)
        .checked_add(rank)
        .filter(|p| *p <= u32::from(u16::MAX))?;
    let bare = host.trim_matches(|c| c == '[' || c == ']');
    let host = match bare {
        "*" | "0.0.0.0" | "::" | "" => {
            let w = worker_host.trim_matches(|c| c == '[' || c == ']');
            if w.contains(':') {
                format!("[{w}]")
            } else {
                w.to_string()
            }
        }
        h if h.contains(':') => format!("[{h}]"),
        h => h.to_string(),
    };
    Some(format!("tcp://{host}:{port}"))
}

fn string(o: &Map<String, Value>, key: &str) -> Option<String> {
    o.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

fn port(o: &Map<String, Value>, key: &str) -> Option<u16> {
    o.get(key)
        .and_then(Value::as_u64)
        .filter(|p| *p > 0)
        .and_then(|p| u16::try_from(p).ok())
}

fn positive(o: &Map<String, Value>, key: &str) -> Option<u32> {
    o.get(key)
        .and_then(Value::as_u64)
        .filter(|n| *n > 0)
        .and_then(|n| u32::try_from(n).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The two blocks SGLang 0.5.23 advertised (reference sglang-0.5.23.md, M1).
    #[test]
    fn real_blocks_parse_and_resolve_per_rank() {
        let wildcard = json!({"publisher": "zmq", "endpoint_host": "0.0.0.0", "endpoint_port_base": 19078, "topic": "", "block_size": 16, "dp_size": 1, "replay_endpoint_port_base": 19079});
        let b = KvEventsBlock::from_field(&wildcard).expect("parsed");
        assert!(b.is_zmq());
        assert_eq!((b.block_size, b.dp_size), (Some(16), Some(1)));
        assert_eq!(
            b.endpoint("10.0.0.5", 0).as_deref(),
            Some("tcp://10.0.0.5:19078")
        );
        assert_eq!(
            b.replay_endpoint("10.0.0.5", 2).as_deref(),
            Some("tcp://10.0.0.5:19081")
        );
        assert_eq!(b.load_endpoint("10.0.0.5", 0), None);

        let explicit = json!({"publisher": "zmq", "endpoint_host": "127.0.0.1", "endpoint_port_base": 19088, "topic": "", "block_size": 16, "dp_size": 1, "replay_endpoint_port_base": 19089});
        let b = KvEventsBlock::from_field(&explicit).expect("parsed");
        assert_eq!(
            b.endpoint("worker-a", 1).as_deref(),
            Some("tcp://127.0.0.1:19089"),
            "a concrete host is kept"
        );
    }

    #[test]
    fn wildcards_ipv6_and_load_range() {
        let b = KvEventsBlock::from_field(&json!({"publisher": "zmq", "endpoint_host": "*",
            "endpoint_port_base": 19001, "topic": "kv", "block_size": 32, "dp_size": 2,
            "replay_endpoint_port_base": 19002, "load_endpoint_port_base": 19004, "load_topic": "load"}))
        .expect("parsed");
        assert_eq!(b.endpoint("::1", 1).as_deref(), Some("tcp://[::1]:19002"));
        assert_eq!(b.load_endpoint("h", 1).as_deref(), Some("tcp://h:19005"));
        assert_eq!(b.load_topic.as_deref(), Some("load"));
        let v6 = KvEventsBlock::from_field(
            &json!({"endpoint_host": "[::]", "endpoint_port_base": 5557}),
        )
        .expect("parsed");
        assert_eq!(v6.endpoint("h", 0).as_deref(), Some("tcp://h:5557"));
        let v6host = KvEventsBlock::from_field(
            &json!({"endpoint_host": "[fd00::1]", "endpoint_port_base": 5557}),
        )
        .expect("parsed");
        assert_eq!(
            v6host.endpoint("h", 0).as_deref(),
            Some("tcp://[fd00::1]:5557")
        );
        let top =
            KvEventsBlock::from_field(&json!({"endpoint_host": "*", "endpoint_port_base": 65535}))
                .expect("parsed");
        assert_eq!(top.endpoint("h", 1), None, "port overflow");
    }

    #[test]
    fn unusable_blocks_are_none() {
        assert_eq!(KvEventsBlock::from_field(&Value::Null), None);
        assert_eq!(KvEventsBlock::from_field(&json!("x")), None);
        assert_eq!(
            KvEventsBlock::from_field(&json!({"endpoint_host": "*"})),
            None
        );
        assert_eq!(
            KvEventsBlock::from_field(&json!({"endpoint_host": "*", "endpoint_port_base": 70000})),
            None
        );
        assert_eq!(
            KvEventsBlock::from_field(&json!({"endpoint_host": "", "endpoint_port_base": 1})),
            None
        );
    }
}
