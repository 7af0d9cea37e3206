//! How relayed SGLang batches travel on NATS: subject `<prefix>.<worker-key>.<rank>`
//! (worker-key = 16 hex digits of xxh3-64 of the worker URL, subject-safe), the raw
//! SGLang msgpack batch as the payload, and the metadata in NATS headers:
//!
//! | header | value |
//! |---|---|
//! | `Kvr-Format` | `sglang-msgpack` |
//! | `Kvr-Worker-Url` | the worker's URL (identity across router replicas) |
//! | `Kvr-Rank` | DP rank, decimal |
//! | `Kvr-Seq` | the worker's batch sequence number, decimal |
//! | `Kvr-Reset` | optional: `restart` or `gap`, clear the rank before this batch |

use async_nats::HeaderMap;
use bytes::Bytes;

use super::feed::ResetReason;

/// Default subject prefix of relayed SGLang batches.
pub const DEFAULT_RELAY_PREFIX: &str = "kvrouter.kv";
/// Default subjects of Dynamo `RouterEvent`s, any namespace, component and endpoint:
/// Dynamo 1.6.1's endpoint-scoped `namespace.{ns}.component.{comp}.endpoint.{ep}.kv-events`
/// (`EventScope::Endpoint::subject_prefix()` + `.kv-events`, seen on the wire, see
/// tests/data/dynamo-1.6.1) and the older component-scoped 5-token form.
pub const DEFAULT_DYNAMO_SUBJECTS: [&str; 2] = [
    "namespace.*.component.*.endpoint.*.kv-events",
    "namespace.*.component.*.kv-events",
];

pub const HEADER_FORMAT: &str = "Kvr-Format";
pub const HEADER_WORKER_URL: &str = "Kvr-Worker-Url";
pub const HEADER_RANK: &str = "Kvr-Rank";
pub const HEADER_SEQ: &str = "Kvr-Seq";
pub const HEADER_RESET: &str = "Kvr-Reset";
pub const FORMAT_SGLANG: &str = "sglang-msgpack";

/// One relayed SGLang batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayedBatch {
    pub worker_url: String,
    pub rank: u32,
    pub seq: u64,
    pub reset: Option<ResetReason>,
    pub payload: Bytes,
}

/// Why a NATS message is not a relayed batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error("missing header {0}")]
    Missing(&'static str),
    #[error("header {0} is malformed")]
    Malformed(&'static str),
    #[error("unsupported format {0:?}")]
    Format(String),
}

/// Subject-safe key of a worker URL, identical on every replica.
pub fn worker_key(worker_url: &str) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(worker_url.as_bytes()))
}

/// The subject a batch of `(worker_url, rank)` is relayed on.
pub fn relay_subject(prefix: &str, worker_url: &str, rank: u32) -> String {
    format!("{prefix}.{}.{rank}", worker_key(worker_url))
}

/// Headers of a relayed batch.
pub fn encode_headers(batch: &RelayedBatch) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(HEADER_FORMAT, FORMAT_SGLANG);
    headers.insert(HEADER_WORKER_URL, batch.worker_url.as_str());
    headers.insert(HEADER_RANK, batch.rank.to_string());
    headers.insert(HEADER_SEQ, batch.seq.to_string());
    if let Some(reset) = batch.reset {
        headers.insert(HEADER_RESET, reset.as_str());
    }
    headers
}

/// Decodes a consumed message of `source` (`nats`, `jetstream`) and counts it: a batch in
/// `batches{source}`, a bad envelope in `decode_errors{envelope}` with one warning per consumer
/// (`warned` remembers it), so a stream of malformed messages cannot flood the log.
pub fn decode_counted(
    message: async_nats::Message,
    source: &'static str,
    warned: &mut bool,
) -> Option<RelayedBatch> {
    let m = super::metrics::metrics();
    match decode(message.headers.as_ref(), message.payload) {
        Ok(batch) => {
            m.batches.with_label_values(&[source]).inc();
            Some(batch)
        }
        Err(e) => {
            m.decode_errors.with_label_values(&["envelope"]).inc();
            if !std::mem::replace(warned, true) {
                tracing::warn!(subject = %message.subject, source, error = %e, "kv events: malformed relayed message skipped");
            }
            None
        }
    }
}

/// Reads a relayed batch back from a NATS message's headers and payload.
pub fn decode(headers: Option<&HeaderMap>, payload: Bytes) -> Result<RelayedBatch, EnvelopeError> {
    let headers = headers.ok_or(EnvelopeError::Missing(HEADER_FORMAT))?;
    let get = |name: &'static str| headers.get(name).map(|v| v.as_str());
    let format = get(HEADER_FORMAT).ok_or(EnvelopeError::Missing(HEADER_FORMAT))?;
    if format != FORMAT_SGLANG {
        return Err(EnvelopeError::Format(format.to_owned()));
    }
    let worker_url = get(HEADER_WORKER_URL)
        .filter(|u| !u.is_empty())
        .ok_or(EnvelopeError::Missing(HEADER_WORKER_URL))?
        .to_owned();
    let rank = get(HEADER_RANK)
        .ok_or(EnvelopeError::Missing(HEADER_RANK))?
        .parse()
        .map_err(|_| EnvelopeError::Malformed(HEADER_RANK))?;
    let seq = get(HEADER_SEQ)
        .ok_or(EnvelopeError::Missing(HEADER_SEQ))?
        .parse()
        .map_err(|_| EnvelopeError::Malformed(HEADER_SEQ))?;
    let reset = match get(HEADER_RESET) {
        None => None,
        Some(text) => Some(ResetReason::parse(text).ok_or(EnvelopeError::Malformed(HEADER_RESET))?),
    };
    Ok(RelayedBatch {
        worker_url,
        rank,
        seq,
        reset,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let batch = RelayedBatch {
            worker_url: "http://127.0.0.1:30000".into(),
            rank: 2,
            seq: 77,
            reset: Some(ResetReason::Restart),
            payload: Bytes::from_static(b"\x92\xcb"),
        };
        let headers = encode_headers(&batch);
        assert_eq!(
            decode(Some(&headers), batch.payload.clone()).unwrap(),
            batch
        );
    }

    #[test]
    fn subject_is_stable_and_subject_safe() {
        let subject = relay_subject(DEFAULT_RELAY_PREFIX, "http://10.0.0.1:8000", 1);
        assert_eq!(
            subject,
            relay_subject(DEFAULT_RELAY_PREFIX, "http://10.0.0.1:8000", 1)
        );
        let key = subject.split('.').nth(2).unwrap();
        assert_eq!(key.len(), 16);
        assert!(key.chars().all(|c| c.is_ascii_hexdigit()));
        assert!(subject.ends_with(".1"));
    }

    #[test]
    fn missing_or_bad_headers_are_errors() {
        assert!(decode(None, Bytes::new()).is_err());
        let mut headers = HeaderMap::new();
        headers.insert(HEADER_FORMAT, FORMAT_SGLANG);
        headers.insert(HEADER_WORKER_URL, "http://w");
        headers.insert(HEADER_RANK, "0");
        assert_eq!(
            decode(Some(&headers), Bytes::new()),
            Err(EnvelopeError::Missing(HEADER_SEQ))
        );
        headers.insert(HEADER_SEQ, "x");
        assert_eq!(
            decode(Some(&headers), Bytes::new()),
            Err(EnvelopeError::Malformed(HEADER_SEQ))
        );
        headers.insert(HEADER_SEQ, "1");
        headers.insert(HEADER_RESET, "maybe");
        assert_eq!(
            decode(Some(&headers), Bytes::new()),
            Err(EnvelopeError::Malformed(HEADER_RESET))
        );
    }
}
