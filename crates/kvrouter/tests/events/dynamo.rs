//! Dynamo 1.6.1's own KV events through the router binary: the bytes its `KvEventPublisher`
//! put on the wire (tests/data/dynamo-1.6.1, recorded by conformance/dynamo/capture.py) are
//! replayed over a real `nats-server` (the NATS event plane, 7-token subject, batch payload)
//! and over ZMQ PUB sockets (Dynamo's default event plane, 4 frames; relay mode included),
//! and a request for a prefix Dynamo published routes to the worker that holds it, mapped
//! by `--dynamo-worker-id` or by the registration label `dynamo_worker_id`.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use support::http::client;
use support::kv::{blocks_of, debug_index, routed, wait_index, ADMIN};
use support::nats::NatsServer;
use support::stub::{Behaviour, Stub};
use support::wait::Deadline;
use zeromq::{PubSocket, Socket, SocketSend, ZmqMessage};

/// Dynamo's `kv_block_size` in the fixtures (and the stubs' page size).
const PAGE: &str = "16";

struct Message {
    subject: Option<String>,
    frames: Vec<Bytes>,
    envelope: Bytes,
}

fn unhex(hex: &str) -> Bytes {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect::<Vec<u8>>()
        .into()
}

fn fixture(name: &str) -> Vec<Message> {
    let path = format!(
        "{}/tests/data/dynamo-1.6.1/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|line| {
            let row: Value = serde_json::from_str(line).unwrap();
            Message {
                subject: row["subject"].as_str().map(str::to_owned),
                frames: row["frames"]
                    .as_array()
                    .map(|f| f.iter().map(|x| unhex(x.as_str().unwrap())).collect())
                    .unwrap_or_default(),
                envelope: unhex(row["hex"].as_str().unwrap()),
            }
        })
        .collect()
}

fn tokens(start: u32, blocks: u32) -> Vec<u32> {
    (start..start + blocks * 16).collect()
}

async fn stub() -> Stub {
    Stub::start(Behaviour::Bytes(Bytes::from_static(br#"{"text":"ok"}"#))).await
}

fn kv_router(extra: &[&str]) -> support::Proc {
    let mut args = vec![
        "--mode",
        "kv",
        "--page-size",
        PAGE,
        "--admin-api-key",
        ADMIN,
        "--no-predict",
    ];
    args.extend_from_slice(extra);
    support::router(&args)
}

/// Registers `url` with a `dynamo_worker_id` label.
async fn register_labelled(router: &str, url: &str, dynamo_id: &str) {
    let resp = client()
        .post(format!("{router}/workers"))
        .bearer_auth(ADMIN)
        .json(&json!({"url": url, "labels": {"dynamo_worker_id": dynamo_id}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202, "{}", resp.text().await.unwrap());
}

async fn wait_routable(router: &str, n: usize) {
    wait_index(&client(), router, "units", |v| {
        v["units"].as_array().is_some_and(|u| u.len() == n)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_event_plane_routes_to_the_dynamo_holder() {
    let nats = NatsServer::start().await;
    let (w1, w2) = (stub().await, stub().await);
    let flag = format!("{}=1", w1.url);
    let r = kv_router(&[
        "--worker-urls",
        &w1.url,
        "--nats-url",
        &nats.url,
        "--dynamo-worker-id",
        &flag,
    ]);
    register_labelled(&r.url, &w2.url, "2").await;
    wait_routable(&r.url, 2).await;

    let messages = fixture("nats.jsonl");
    let client_nats = nats.client().await;
    for m in &messages {
        let subject = m.subject.clone().unwrap();
        assert_eq!(
            subject,
            "namespace.kvtest.component.backend.endpoint.generate.kv-events"
        );
        client_nats
            .publish(subject, m.envelope.clone())
            .await
            .unwrap();
    }
    client_nats.flush().await.unwrap();

    // Worker 1: A (2) + B (2) - B[1] + D (1, lora) = 4 blocks; worker 2: E (3) - E[2] = 2.
    let c = client();
    let (u1, u2) = (w1.url.clone(), w2.url.clone());
    wait_index(&c, &r.url, "Dynamo's events indexed", |v| {
        blocks_of(v, &u1) == 4 && blocks_of(v, &u2) == 2
    })
    .await;
    assert_eq!(routed(&r.url, &tokens(1000, 4)).await, w1.url);
    assert_eq!(routed(&r.url, &tokens(5000, 3)).await, w2.url);
}

/// A PUB socket replaying one Dynamo publisher's messages.
struct Publisher {
    socket: PubSocket,
    endpoint: String,
    messages: Vec<Message>,
}

impl Publisher {
    async fn bind(messages: Vec<Message>) -> Self {
        let mut socket = PubSocket::new();
        let endpoint = socket.bind("tcp://127.0.0.1:0").await.unwrap().to_string();
        Self {
            socket,
            endpoint,
            messages,
        }
    }

    async fn send(&mut self, i: usize) {
        let frames = self.messages[i].frames.clone();
        let message = ZmqMessage::try_from(frames).unwrap();
        self.socket.send(message).await.unwrap();
    }

    /// ZMQ slow joiner: repeats the first message (a store; repeats are skipped as
    /// duplicates) until the router shows `worker` holding blocks, then sends the rest.
    async fn replay(&mut self, router: &str, worker: &str) {
        let c = client();
        let deadline = Deadline::after(Duration::from_secs(30));
        loop {
            self.send(0).await;
            if blocks_of(&debug_index(&c, router).await, worker) > 0 {
                break;
            }
            deadline.check(&format!("the router to subscribe to {}", self.endpoint));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for i in 1..self.messages.len() {
            self.send(i).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zmq_event_plane_and_relay_route_to_the_dynamo_holder() {
    // zmq.jsonl holds two publishers (workers 1 and 2, one bound socket each in Dynamo).
    let (mut first, mut second): (Vec<_>, Vec<_>) = fixture("zmq.jsonl")
        .into_iter()
        .partition(|m| m.frames[1] == fixture("zmq.jsonl")[0].frames[1]);
    assert_eq!((first.len(), second.len()), (4, 2));
    for m in first.iter().chain(&second).chain(&fixture("relay.jsonl")) {
        assert_eq!(m.frames.len(), 4);
        assert_eq!(&m.frames[3][5..], &m.envelope[..]);
    }
    let mut p1 = Publisher::bind(std::mem::take(&mut first)).await;
    let mut p2 = Publisher::bind(std::mem::take(&mut second)).await;
    let mut p3 = Publisher::bind(fixture("relay.jsonl")).await;

    let (w1, w2, w3) = (stub().await, stub().await, stub().await);
    let flag = format!("{}=1", w1.url);
    let r = kv_router(&[
        "--worker-urls",
        &w1.url,
        "--dynamo-worker-id",
        &flag,
        "--dynamo-zmq-endpoint",
        &p1.endpoint,
        "--dynamo-zmq-endpoint",
        &p2.endpoint,
        "--dynamo-zmq-endpoint",
        &p3.endpoint,
    ]);
    register_labelled(&r.url, &w2.url, "2").await;
    register_labelled(&r.url, &w3.url, "0x3").await;
    wait_routable(&r.url, 3).await;

    p1.replay(&r.url, &w1.url).await;
    p2.replay(&r.url, &w2.url).await;
    p3.replay(&r.url, &w3.url).await;

    // Worker 3 (relayed SGLang stream): F (2) + G (1), H is host_pinned (not a GPU hit),
    // G removed, cleared, F again = 2 blocks.
    let c = client();
    let (u1, u2, u3) = (w1.url.clone(), w2.url.clone(), w3.url.clone());
    let v = wait_index(&c, &r.url, "Dynamo's events indexed", |v| {
        blocks_of(v, &u1) == 4 && blocks_of(v, &u2) == 2 && blocks_of(v, &u3) == 2
    })
    .await;
    assert_eq!(v["zmq_sources"], 0, "no per-worker SGLang sources: {v}");
    assert_eq!(routed(&r.url, &tokens(1000, 4)).await, w1.url);
    assert_eq!(routed(&r.url, &tokens(5000, 3)).await, w2.url);
    assert_eq!(routed(&r.url, &tokens(7000, 3)).await, w3.url);
}
