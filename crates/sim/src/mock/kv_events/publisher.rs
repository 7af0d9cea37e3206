//! The per-rank ZMQ publisher: a PUB socket sending `[topic, seq (8B BE), payload]` with
//! `seq` counting from 0, a ring of the last `buffer_steps` batches, and a ROUTER replay
//! socket answering `[identity, "", start_seq]` with `[identity, "", topic, seq, payload]`
//! per buffered batch with `seq >= start_seq`, then `[identity, "", "", -1, ""]`
//! (SGLang 0.5.23 `ZmqEventPublisher._service_replay`: the DEALER sees 4 frames). With
//! the positional format the older 3-frame answer `["", seq, payload]` / `["", -1, ""]`
//! is kept.

use std::collections::VecDeque;

use bytes::Bytes;
use tokio::sync::mpsc;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use super::coalesce::{coalesce, per_page};
use super::encode::encode_batch;
use super::endpoint::Endpoint;
use crate::mock::cache::CacheEvent;
use crate::mock::config::EventFormat;

/// Sends encoded batches to a rank's publisher task (a no-op when events are off).
#[derive(Debug, Clone, Default)]
pub struct PublisherHandle {
    tx: Option<mpsc::UnboundedSender<Bytes>>,
    format: EventFormat,
}

impl PublisherHandle {
    /// A handle that drops everything.
    pub fn disabled() -> PublisherHandle {
        PublisherHandle::default()
    }

    /// Encodes one scheduler step's events as a batch and queues it. In the tagged
    /// (0.5.23) format the events are merged first as SGLang's recorder merges them; in the
    /// positional (0.5.9) format they are split one page each, as SGLang 0.5.9 records them.
    pub fn publish_events(&self, ts: f64, events: Vec<CacheEvent>, block_size: usize, rank: u32) {
        if self.tx.is_none() {
            return;
        }
        let events = match self.format {
            EventFormat::Tagged => coalesce(events),
            EventFormat::Positional => per_page(events, block_size),
        };
        self.publish(encode_batch(ts, &events, block_size, rank, self.format));
    }

    /// True when batches are actually published.
    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// Queues one encoded batch.
    pub fn publish(&self, payload: Vec<u8>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Bytes::from(payload));
        }
    }
}

/// Sockets of one rank, bound or connected, ready to run.
pub struct RankSockets {
    pub pub_socket: PubSocket,
    /// Address to connect the PUB socket to (connect-mode endpoints), done in the task.
    pub connect_to: Option<String>,
    pub replay: Option<RouterSocket>,
}

/// Opens the PUB socket (bind or connect) at `ep`.
pub async fn open_pub(
    ep: &Endpoint,
    bind_host: &str,
    bind: bool,
) -> Result<(PubSocket, Endpoint), String> {
    let mut s = PubSocket::new();
    let addr = ep.socket_addr(bind_host);
    if bind {
        let bound = s
            .bind(&addr)
            .await
            .map_err(|e| format!("bind {addr}: {e}"))?;
        Ok((s, with_actual_port(ep, &bound.to_string())))
    } else {
        // Connecting happens in the publisher task: the zeromq crate retries until the peer
        // is up, and startup must not wait for it.
        Ok((s, ep.clone()))
    }
}

/// Binds the ROUTER replay socket at `ep`.
pub async fn open_replay(
    ep: &Endpoint,
    bind_host: &str,
) -> Result<(RouterSocket, Endpoint), String> {
    let mut s = RouterSocket::new();
    let addr = ep.socket_addr(bind_host);
    let bound = s
        .bind(&addr)
        .await
        .map_err(|e| format!("bind {addr}: {e}"))?;
    Ok((s, with_actual_port(ep, &bound.to_string())))
}

fn with_actual_port(ep: &Endpoint, bound: &str) -> Endpoint {
    match (
        ep,
        bound
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse::<u16>().ok()),
    ) {
        (Endpoint::Tcp { host, .. }, Some(port)) => Endpoint::Tcp {
            host: host.clone(),
            port,
        },
        _ => ep.clone(),
    }
}

/// Starts the publisher task of one rank and returns its handle.
pub fn spawn(
    sockets: RankSockets,
    topic: String,
    buffer_steps: usize,
    format: EventFormat,
) -> PublisherHandle {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(run(
        sockets,
        Bytes::from(topic),
        buffer_steps.max(1),
        format,
        rx,
    ));
    PublisherHandle {
        tx: Some(tx),
        format,
    }
}

async fn run(
    sockets: RankSockets,
    topic: Bytes,
    buffer_steps: usize,
    format: EventFormat,
    mut rx: mpsc::UnboundedReceiver<Bytes>,
) {
    let RankSockets {
        mut pub_socket,
        connect_to,
        mut replay,
    } = sockets;
    if let Some(addr) = connect_to {
        if let Err(e) = pub_socket.connect(&addr).await {
            tracing::warn!("kv-event publisher cannot connect to {addr}: {e}");
        }
    }
    let mut ring: VecDeque<(u64, Bytes)> = VecDeque::with_capacity(buffer_steps.min(4096));
    let mut seq: u64 = 0;
    loop {
        tokio::select! {
            payload = rx.recv() => {
                let Some(payload) = payload else { break };
                let frames = vec![topic.clone(), Bytes::copy_from_slice(&seq.to_be_bytes()), payload.clone()];
                if let Ok(msg) = ZmqMessage::try_from(frames) {
                    if let Err(e) = pub_socket.send(msg).await {
                        tracing::debug!("kv-event publish failed: {e}");
                    }
                }
                if ring.len() == buffer_steps {
                    ring.pop_front();
                }
                ring.push_back((seq, payload));
                seq += 1;
            }
            req = recv_replay(&mut replay) => {
                match req {
                    Ok(msg) => answer_replay(replay.as_mut(), msg, &ring, replay_topic(format, &topic)).await,
                    Err(e) => tracing::debug!("replay socket: {e}"),
                }
            }
        }
    }
}

async fn recv_replay(replay: &mut Option<RouterSocket>) -> Result<ZmqMessage, zeromq::ZmqError> {
    match replay {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

/// The topic frame of replay answers: SGLang 0.5.23 sends it (`None` = the older
/// 3-frame answer without it).
fn replay_topic(format: EventFormat, topic: &Bytes) -> Option<&Bytes> {
    (format == EventFormat::Tagged).then_some(topic)
}

async fn answer_replay(
    socket: Option<&mut RouterSocket>,
    msg: ZmqMessage,
    ring: &VecDeque<(u64, Bytes)>,
    topic: Option<&Bytes>,
) {
    let Some(socket) = socket else { return };
    let frames = msg.into_vec();
    // [identity, "", start_seq(8B BE)]; tolerate a missing empty delimiter.
    let (Some(identity), Some(last)) = (frames.first(), frames.last()) else {
        return;
    };
    if frames.len() < 2 || last.len() != 8 {
        tracing::debug!(
            "ignoring malformed replay request ({} frames)",
            frames.len()
        );
        return;
    }
    let mut start = [0u8; 8];
    start.copy_from_slice(last);
    let start = u64::from_be_bytes(start);
    let frames_of = |topic_frame: Option<Bytes>, seq: [u8; 8], payload: Bytes| {
        let mut f = vec![identity.clone(), Bytes::new()];
        f.extend(topic_frame);
        f.push(Bytes::copy_from_slice(&seq));
        f.push(payload);
        f
    };
    for (seq, payload) in ring.iter().filter(|(s, _)| *s >= start) {
        let reply = frames_of(topic.cloned(), seq.to_be_bytes(), payload.clone());
        if let Ok(m) = ZmqMessage::try_from(reply) {
            if socket.send(m).await.is_err() {
                return;
            }
        }
    }
    // End marker: the topic frame is empty (SGLang sends `b""`, not the topic).
    let end = frames_of(
        topic.map(|_| Bytes::new()),
        (-1i64).to_be_bytes(),
        Bytes::new(),
    );
    if let Ok(m) = ZmqMessage::try_from(end) {
        let _ = socket.send(m).await;
    }
}
