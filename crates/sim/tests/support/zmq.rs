//! ZMQ clients of a mock's KV-event sockets: endpoint discovery from `/server_info`,
//! a subscriber with the slow-joiner handshake, and a replay (DEALER) client. Payloads
//! are decoded by `sglang_wire`, independent of `src/`.

use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, SubSocket, ZmqMessage};

use super::http;
use super::sglang_wire::{decode_payload, Batch, Ev};

/// The port of an endpoint, for the tests that import it from here.
pub use super::http::port_of;

/// A mock's `/server_info` (where a client reads its configuration).
pub async fn server_info(url: &str) -> Value {
    let (_, info) = http::get(url, "/server_info").await;
    assert!(info.is_object(), "server_info is a JSON object: {info}");
    info
}

/// `kv_events_config` from a mock's `/server_info` (SGLang reports it as a JSON string).
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
    let client = http::client();
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
        // SGLang 0.5.23 answers ["", topic, seq, payload] and ends ["", "", -1, ""];
        // the positional (0.5.9-era) mock answers ["", seq, payload].
        assert!(
            frames.len() == 4 || frames.len() == 3,
            "replay replies are [\"\", topic, seq, payload] (or [\"\", seq, payload])"
        );
        assert!(frames[0].is_empty());
        let n = frames.len();
        let seq = i64::from_be_bytes(frames[n - 2][..].try_into().expect("8-byte seq"));
        if seq == -1 {
            assert!(frames[n - 1].is_empty());
            return out;
        }
        let (ts, events, rank) = decode_payload(&frames[n - 1]);
        out.push(Batch {
            seq: seq as u64,
            ts,
            events,
            rank,
        });
    }
}
