//! A fake SGLang `ZmqEventPublisher` (PUB + ROUTER replay, written here), and the
//! handshake that makes a subscriber's link live before a test publishes.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kvrouter::events::RecordingSink;
use parking_lot::Mutex;
use tokio::task::JoinHandle;
use zeromq::{Endpoint, PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use super::wait::Deadline;

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
        let mut socket = PubSocket::new();
        let bound = bind_retrying(&mut socket, endpoint, "PUB").await;
        let mut router = RouterSocket::new();
        let replay_bound = bind_retrying(&mut router, replay_endpoint, "ROUTER").await;
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
        self.lose(seq, payload.clone());
        self.republish(seq, payload).await;
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

/// Binds `socket` at `endpoint`, retrying for 10 s while a previous socket releases it.
async fn bind_retrying(socket: &mut impl Socket, endpoint: &str, kind: &str) -> Endpoint {
    let deadline = Deadline::after(Duration::from_secs(10));
    loop {
        match socket.bind(endpoint).await {
            Ok(bound) => return bound,
            Err(e) => deadline.check(&format!("{kind} to bind {endpoint} ({e})")),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
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

/// Publishes batch 0 (a cache reset, as SGLang does at start) until `sink` holds
/// `count` records: the subscription is live from then on (ZMQ slow-joiner safe).
/// `who` names the receiving side in the timeout message.
pub async fn handshake(
    publisher: &mut FakePublisher,
    sink: &RecordingSink,
    payload: Vec<u8>,
    count: usize,
    who: &str,
) {
    publisher.lose(0, payload.clone());
    let deadline = Deadline::after(Duration::from_secs(10));
    loop {
        publisher.republish(0, payload.clone()).await;
        if sink
            .wait_until(Duration::from_millis(50), |r| r.len() >= count)
            .await
        {
            return;
        }
        deadline.check(&format!("{who} to receive batch 0"));
    }
}
