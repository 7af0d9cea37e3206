//! The shared-prediction message: one NATS message on [`SUBJECT`] carries a batch of
//! bookings and follow-ups from one router instance, MessagePack-encoded (`rmp-serde`,
//! structs as arrays). Every size is bounded on both sides.

use kvrouter_index::SeqHash;
use serde::{Deserialize, Serialize};

/// The one core-NATS subject every replica publishes on and subscribes to.
pub(crate) const SUBJECT: &str = "kvrouter.book";
/// Most sequence hashes one booking carries (a longer prompt shares its first ones: a
/// prefix of a prediction is still a prediction). 4096 hashes = 32 KiB.
pub(crate) const MAX_SEQS: usize = 4096;
/// Most items in one message.
pub(crate) const MAX_ITEMS: usize = 256;
/// A message is closed once its estimated size passes this (NATS' default max payload is
/// 1 MiB; one booking is at most ~37 KiB).
pub(crate) const MAX_BATCH_BYTES: usize = 256 * 1024;

/// One message: `instance` (the publishing router's id, so it skips its own), when it was
/// published (`sent_us`, microseconds since the Unix epoch; receivers export the delay) and
/// its items.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Batch {
    pub instance: String,
    pub sent_us: u64,
    pub items: Vec<Item>,
}

/// Microseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// One booking or one follow-up; `n` numbers the bookings of one instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum Item {
    /// A predict-on-route booking on (worker URL, rank): `seqs` predicted for `ttl_ms`, all
    /// but the first `cached` in flight unless `prefilled`.
    Book {
        n: u64,
        worker: String,
        rank: u32,
        seqs: Vec<SeqHash>,
        cached: u32,
        ttl_ms: u32,
        prefilled: bool,
    },
    /// Booking `n`'s prefill ended (first response byte): its in-flight marks end.
    Prefilled { n: u64 },
    /// Booking `n` failed before prefill: its prediction is dropped.
    Cancel { n: u64 },
}

impl Item {
    /// Upper estimate of the item's encoded size.
    pub(crate) fn size_hint(&self) -> usize {
        match self {
            Item::Book { worker, seqs, .. } => 48 + worker.len() + 9 * seqs.len(),
            _ => 16,
        }
    }
}

/// Encodes a batch (infallible for these types; an error is reported, never panics).
pub(crate) fn encode(batch: &Batch) -> Result<Vec<u8>, rmp_serde::encode::Error> {
    rmp_serde::to_vec(batch)
}

/// Why a received message is not applied.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DecodeError {
    Malformed,
    TooLarge,
}

/// Decodes and bounds-checks one received message.
pub(crate) fn decode(payload: &[u8]) -> Result<Batch, DecodeError> {
    let batch: Batch = rmp_serde::from_slice(payload).map_err(|_| DecodeError::Malformed)?;
    let too_large = batch.items.len() > MAX_ITEMS
        || batch.items.iter().any(|i| match i {
            Item::Book { seqs, .. } => seqs.len() > MAX_SEQS,
            _ => false,
        });
    if too_large {
        return Err(DecodeError::TooLarge);
    }
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn book(n: u64, len: usize) -> Item {
        Item::Book {
            n,
            worker: "http://10.0.0.1:30000".into(),
            rank: 1,
            seqs: (0..len as u64)
                .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .collect(),
            cached: 2,
            ttl_ms: 10_000,
            prefilled: false,
        }
    }

    #[test]
    fn round_trip_and_size_estimate() {
        let b = Batch {
            instance: "12-abc".into(),
            sent_us: 1_700_000_000_000_000,
            items: vec![book(1, 64), Item::Prefilled { n: 1 }, Item::Cancel { n: 2 }],
        };
        let bytes = encode(&b).unwrap();
        assert_eq!(decode(&bytes).unwrap(), b);
        let hint: usize = b.items.iter().map(Item::size_hint).sum();
        assert!(bytes.len() <= hint, "{} > {hint}", bytes.len());
    }

    #[test]
    fn bounds_and_garbage_are_rejected() {
        assert_eq!(decode(b"\xc1garbage"), Err(DecodeError::Malformed));
        let big = Batch {
            instance: "x".into(),
            sent_us: 0,
            items: vec![book(1, MAX_SEQS + 1)],
        };
        assert_eq!(decode(&encode(&big).unwrap()), Err(DecodeError::TooLarge));
        let many = Batch {
            instance: "x".into(),
            sent_us: 0,
            items: (0..=MAX_ITEMS as u64).map(|n| Item::Cancel { n }).collect(),
        };
        assert_eq!(decode(&encode(&many).unwrap()), Err(DecodeError::TooLarge));
    }
}
