//! Helpers shared by the `mock_*` integration tests: an HTTP client, a ZMQ subscriber and
//! replay client, and a KV-event decoder written from SGLang's wire spec on `rmpv`
//! (independent of the mock's encoder).
#![allow(dead_code)]

use std::io::Cursor;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, SubSocket, ZmqMessage};

/// One decoded event.
#[derive(Debug, Clone, PartialEq)]
pub enum Ev {
    Stored {
        hashes: Vec<i64>,
        parent: Option<i64>,
        tokens: Vec<u64>,
        block_size: u64,
        medium: Option<String>,
    },
    Removed {
        hashes: Vec<i64>,
    },
    Cleared,
}

/// A decoded batch `[ts, events, attn_dp_rank]`.
#[derive(Debug, Clone)]
pub struct Batch {
    pub seq: u64,
    pub ts: f64,
    pub events: Vec<Ev>,
    pub rank: Option<i64>,
}

fn as_i64(v: &rmpv::Value) -> i64 {
    v.as_i64()
        .or_else(|| v.as_u64().map(|u| u as i64))
        .expect("integer")
}

/// Decodes a msgpack payload with rmpv, following the spec (tag string first, arrays).
pub fn decode_payload(payload: &[u8]) -> (f64, Vec<Ev>, Option<i64>) {
    let v = rmpv::decode::read_value(&mut Cursor::new(payload)).expect("valid msgpack");
    let outer = v.as_array().expect("batch is an array");
    assert!(outer.len() >= 2, "batch has ts and events");
    let ts = outer[0].as_f64().expect("ts is a float");
    let rank = outer.get(2).map(as_i64);
    let events = outer[1]
        .as_array()
        .expect("events array")
        .iter()
        .map(|e| {
            let a = e.as_array().expect("event is an array (array_like)");
            match a[0].as_str().expect("tag string first") {
                "BlockStored" => Ev::Stored {
                    hashes: a[1]
                        .as_array()
                        .expect("hashes")
                        .iter()
                        .map(as_i64)
                        .collect(),
                    parent: if a[2].is_nil() {
                        None
                    } else {
                        Some(as_i64(&a[2]))
                    },
                    tokens: a[3]
                        .as_array()
                        .expect("tokens")
                        .iter()
                        .map(|t| t.as_u64().expect("token"))
                        .collect(),
                    block_size: a[4].as_u64().expect("block_size"),
                    medium: a.get(6).and_then(|m| m.as_str().map(str::to_string)),
                },
                "BlockRemoved" => Ev::Removed {
                    hashes: a[1]
                        .as_array()
                        .expect("hashes")
                        .iter()
                        .map(as_i64)
                        .collect(),
                },
                "AllBlocksCleared" => Ev::Cleared,
                other => panic!("unknown tag {other}"),
            }
        })
        .collect();
    (ts, events, rank)
}

/// Reads the configuration a client would use from `/server_info`.
pub async fn server_info(url: &str) -> Value {
    reqwest::get(format!("{url}/server_info"))
        .await
        .expect("server_info")
        .json()
        .await
        .expect("json")
}

/// `kv_events_config` from `/server_info` (SGLang reports it as a JSON string).
pub async fn kv_config(url: &str) -> Value {
    let info = server_info(url).await;
    let s = info["kv_events_config"]
        .as_str()
        .expect("kv_events_config is a string");
    serde_json::from_str(s).expect("config json")
}

/// Turns `tcp://*:P` into a dialable address.
pub fn dialable(ep: &str) -> String {
    ep.replace('*', "127.0.0.1")
}

/// TCP port of an endpoint.
pub fn port_of(ep: &str) -> u16 {
    ep.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port")
}

/// A subscriber on a mock's PUB socket.
pub struct Sub {
    sock: SubSocket,
}

impl Sub {
    pub async fn connect(endpoint: &str, topic: &str) -> Sub {
        let mut sock = SubSocket::new();
        sock.connect(&dialable(endpoint))
            .await
            .expect("connect SUB");
        sock.subscribe(topic).await.expect("subscribe");
        Sub { sock }
    }

    /// Next 3-frame message, or None after `wait`.
    pub async fn recv(&mut self, wait: Duration) -> Option<(Bytes, Batch)> {
        let msg = tokio::time::timeout(wait, self.sock.recv())
            .await
            .ok()?
            .expect("recv");
        let frames = msg.into_vec();
        assert_eq!(frames.len(), 3, "PUB messages have 3 frames");
        let seq = u64::from_be_bytes(frames[1][..].try_into().expect("8-byte seq"));
        let (ts, events, rank) = decode_payload(&frames[2]);
        Some((
            frames[0].clone(),
            Batch {
                seq,
                ts,
                events,
                rank,
            },
        ))
    }

    /// Collects events until `pred` holds on the collected list (or panics after 10 s).
    pub async fn until(&mut self, mut pred: impl FnMut(&[Ev]) -> bool) -> Vec<Ev> {
        let mut all = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !pred(&all) {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let (_, b) = self
                .recv(left)
                .await
                .expect("expected events before timeout");
            all.extend(b.events);
        }
        all
    }
}

/// Subscribes and makes sure the subscription is live: flushes the (idle) mock until an
/// `AllBlocksCleared` arrives (ZMQ's slow-joiner handshake, no sleeps).
pub async fn synced_sub(url: &str, endpoint: &str, topic: &str) -> Sub {
    let mut sub = Sub::connect(endpoint, topic).await;
    let client = reqwest::Client::new();
    for _ in 0..100 {
        let r = client
            .post(format!("{url}/flush_cache"))
            .send()
            .await
            .expect("flush");
        assert_eq!(r.status(), 200, "mock must be idle while syncing");
        if let Some((_, b)) = sub.recv(Duration::from_millis(100)).await {
            if b.events.contains(&Ev::Cleared) {
                return sub;
            }
        }
    }
    panic!("subscription never became live");
}

/// Asks a replay socket for every buffered batch with `seq >= start`.
pub async fn replay(endpoint: &str, start: u64) -> Vec<Batch> {
    let mut d = DealerSocket::new();
    d.connect(&dialable(endpoint))
        .await
        .expect("connect DEALER");
    let req: ZmqMessage = ZmqMessage::try_from(vec![
        Bytes::new(),
        Bytes::copy_from_slice(&start.to_be_bytes()),
    ])
    .expect("msg");
    d.send(req).await.expect("send replay request");
    let mut out = Vec::new();
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), d.recv())
            .await
            .expect("replay reply")
            .expect("recv");
        let frames = msg.into_vec();
        assert_eq!(frames.len(), 3, "replay replies are [\"\", seq, payload]");
        assert!(frames[0].is_empty());
        let seq = i64::from_be_bytes(frames[1][..].try_into().expect("8-byte seq"));
        if seq == -1 {
            assert!(frames[2].is_empty());
            return out;
        }
        let (ts, events, rank) = decode_payload(&frames[2]);
        out.push(Batch {
            seq: seq as u64,
            ts,
            events,
            rank,
        });
    }
}

/// POSTs JSON and returns (status, body json or Null).
pub async fn post(url: &str, path: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .json(&body)
        .send()
        .await
        .expect("post");
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Reads an SSE body into its `data:` payloads, checking the framing.
pub fn sse_events(body: &str) -> Vec<String> {
    assert!(
        body.ends_with("data: [DONE]\n\n"),
        "stream ends with [DONE]: {body:?}"
    );
    body.split_terminator("\n\n")
        .map(|chunk| {
            chunk
                .strip_prefix("data: ")
                .unwrap_or_else(|| panic!("bad SSE chunk {chunk:?}"))
                .to_string()
        })
        .collect()
}

/// Page-size rule of SGLang: cached tokens of a fully cached prompt of `len` tokens.
pub fn cached_rule(len: usize, page: usize) -> usize {
    (len - 1) / page * page
}
