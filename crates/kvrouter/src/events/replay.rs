//! Client of SGLang's replay endpoint: a DEALER asks `["", start_seq(8B BE)]` and
//! reads `["", seq, payload]` replies (2, 3 or 4 frames accepted: the last two are
//! seq and payload) until the `seq == -1` end marker.

use std::time::Duration;

use bytes::Bytes;
use zeromq::{DealerSocket, Socket, SocketOptions, SocketRecv, SocketSend, ZmqMessage};

/// End-of-replay marker: seq -1 as signed 64-bit big-endian.
const END_MARKER: u64 = u64::MAX;

/// At most this many batches are accepted from one replay (SGLang keeps 10,000).
pub(crate) const MAX_REPLAY_BATCHES: usize = 200_000;

/// Why a replay failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplayError {
    #[error("replay endpoint {0}: {1}")]
    Zmq(String, zeromq::ZmqError),
    #[error("replay endpoint {0}: no answer within {1:?}")]
    Timeout(String, Duration),
    #[error("replay endpoint {0}: malformed reply ({1})")]
    Malformed(String, &'static str),
    #[error("replay endpoint {0}: more than {MAX_REPLAY_BATCHES} batches")]
    TooLong(String),
}

/// Fetches every buffered batch with `seq >= from`, in order. Each step (connect,
/// each reply) must complete within `timeout`.
pub(crate) async fn fetch_replay(
    endpoint: &str,
    from: u64,
    timeout: Duration,
) -> Result<Vec<(u64, Bytes)>, ReplayError> {
    let zmq_err = |e| ReplayError::Zmq(endpoint.to_owned(), e);
    let mut options = SocketOptions::default();
    options.connect_timeout(timeout);
    let mut dealer = DealerSocket::with_options(options);
    tokio::time::timeout(timeout, dealer.connect(endpoint))
        .await
        .map_err(|_| ReplayError::Timeout(endpoint.to_owned(), timeout))?
        .map_err(zmq_err)?;
    let request = ZmqMessage::try_from(vec![
        Bytes::new(),
        Bytes::copy_from_slice(&from.to_be_bytes()),
    ])
    .map_err(|_| ReplayError::Malformed(endpoint.to_owned(), "request"))?;
    dealer.send(request).await.map_err(zmq_err)?;
    let mut batches = Vec::new();
    loop {
        let reply = tokio::time::timeout(timeout, dealer.recv())
            .await
            .map_err(|_| ReplayError::Timeout(endpoint.to_owned(), timeout))?
            .map_err(zmq_err)?;
        let frames = reply.into_vec();
        let [.., seq, payload] = frames.as_slice() else {
            return Err(ReplayError::Malformed(
                endpoint.to_owned(),
                "fewer than 2 frames",
            ));
        };
        let seq: [u8; 8] = seq
            .as_ref()
            .try_into()
            .map_err(|_| ReplayError::Malformed(endpoint.to_owned(), "seq frame is not 8 bytes"))?;
        let seq = u64::from_be_bytes(seq);
        if seq == END_MARKER {
            return Ok(batches);
        }
        if batches.len() >= MAX_REPLAY_BATCHES {
            return Err(ReplayError::TooLong(endpoint.to_owned()));
        }
        batches.push((seq, payload.clone()));
    }
}
