//! Tolerant decoder of SGLang's KV event batches (msgpack, `msgspec` encoded).
//!
//! Accepted shapes (see docs/events.md):
//! - batch: array `[ts, events]` or `[ts, events, attn_dp_rank, ...]` (rank may be nil);
//! - event: positional array with the tag first (missing trailing fields read as nil,
//!   extra fields ignored) or a map with the tag under `"type"`;
//! - hashes: msgpack int (signed int64 bit-cast to u64, or uint64) or bytes (last 8
//!   bytes, big-endian);
//! - unknown tags decode to [`WireEvent::Unknown`] (counted and skipped by the caller).
//!
//! Malformed input is an error, never a panic.

use rmpv::Value;

/// One decoded SGLang `KVEventBatch`.
#[derive(Debug, Clone, PartialEq)]
pub struct SglangBatch {
    /// Worker wall-clock time (seconds since the epoch) when the batch was built.
    pub ts: f64,
    pub events: Vec<WireEvent>,
    /// `attn_dp_rank` when the worker sent it.
    pub dp_rank: Option<u32>,
}

/// One event as the worker described it (before page-size and medium checks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireEvent {
    Stored {
        block_hashes: Vec<u64>,
        parent: Option<u64>,
        token_ids: Vec<u32>,
        block_size: u32,
        medium: Option<String>,
    },
    Removed {
        block_hashes: Vec<u64>,
        medium: Option<String>,
    },
    Cleared,
    Unknown {
        tag: String,
    },
}

/// Why a payload could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SglangDecodeError {
    #[error("not msgpack: {0}")]
    Msgpack(String),
    #[error("batch must be an array of at least 2 elements [ts, events, rank?]")]
    BadBatch,
    #[error("batch timestamp is not a number")]
    BadTimestamp,
    #[error("event {index}: {reason}")]
    BadEvent { index: usize, reason: String },
}

const TAG_STORED: &str = "BlockStored";
const TAG_REMOVED: &str = "BlockRemoved";
const TAG_CLEARED: &str = "AllBlocksCleared";

/// Decodes one msgpack-encoded SGLang event batch.
pub fn decode_batch(payload: &[u8]) -> Result<SglangBatch, SglangDecodeError> {
    let mut reader = payload;
    let value = rmpv::decode::read_value(&mut reader)
        .map_err(|e| SglangDecodeError::Msgpack(e.to_string()))?;
    let Value::Array(items) = value else {
        return Err(SglangDecodeError::BadBatch);
    };
    if items.len() < 2 {
        return Err(SglangDecodeError::BadBatch);
    }
    let ts = number(&items[0]).ok_or(SglangDecodeError::BadTimestamp)?;
    let Value::Array(raw_events) = &items[1] else {
        return Err(SglangDecodeError::BadBatch);
    };
    let dp_rank = items
        .get(2)
        .and_then(|v| v.as_u64())
        .and_then(|r| u32::try_from(r).ok());
    let events = raw_events
        .iter()
        .enumerate()
        .map(|(index, ev)| {
            decode_event(ev).map_err(|reason| SglangDecodeError::BadEvent { index, reason })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SglangBatch {
        ts,
        events,
        dp_rank,
    })
}

/// Field access over the two event encodings (positional array or named map).
enum Fields<'a> {
    Positional(&'a [Value]),
    Named(&'a [(Value, Value)]),
}

static NIL: Value = Value::Nil;

impl<'a> Fields<'a> {
    /// The field at `position` (array form, tag at 0) or named `name` (map form);
    /// nil when absent.
    fn get(&self, position: usize, name: &str) -> &'a Value {
        match self {
            Fields::Positional(items) => items.get(position).unwrap_or(&NIL),
            Fields::Named(pairs) => pairs
                .iter()
                .find(|(k, _)| k.as_str() == Some(name))
                .map(|(_, v)| v)
                .unwrap_or(&NIL),
        }
    }
}

fn decode_event(value: &Value) -> Result<WireEvent, String> {
    let (tag, fields) = match value {
        Value::Array(items) => {
            let tag = items
                .first()
                .and_then(|t| t.as_str())
                .ok_or("array event without a string tag")?;
            (tag, Fields::Positional(items))
        }
        Value::Map(pairs) => {
            let tag = pairs
                .iter()
                .find(|(k, _)| k.as_str() == Some("type"))
                .and_then(|(_, v)| v.as_str())
                .ok_or("map event without a string \"type\"")?;
            (tag, Fields::Named(pairs))
        }
        _ => return Err("event is neither an array nor a map".into()),
    };
    match tag {
        TAG_STORED => Ok(WireEvent::Stored {
            block_hashes: hash_list(fields.get(1, "block_hashes"))
                .map_err(|e| format!("block_hashes: {e}"))?,
            parent: match fields.get(2, "parent_block_hash") {
                Value::Nil => None,
                v => Some(hash(v).map_err(|e| format!("parent_block_hash: {e}"))?),
            },
            token_ids: token_list(fields.get(3, "token_ids"))?,
            block_size: fields
                .get(4, "block_size")
                .as_u64()
                .and_then(|b| u32::try_from(b).ok())
                .filter(|b| *b > 0)
                .ok_or("block_size missing or not a positive integer")?,
            medium: medium(fields.get(6, "medium"))?,
        }),
        TAG_REMOVED => Ok(WireEvent::Removed {
            block_hashes: hash_list(fields.get(1, "block_hashes"))
                .map_err(|e| format!("block_hashes: {e}"))?,
            medium: medium(fields.get(2, "medium"))?,
        }),
        TAG_CLEARED => Ok(WireEvent::Cleared),
        other => Ok(WireEvent::Unknown {
            tag: other.to_owned(),
        }),
    }
}

fn number(value: &Value) -> Option<f64> {
    match value {
        Value::F64(f) => Some(*f),
        Value::F32(f) => Some(f64::from(*f)),
        Value::Integer(i) => i.as_f64(),
        _ => None,
    }
}

/// An engine block hash: int64 bit-cast, uint64, or bytes (last 8, big-endian).
pub(crate) fn hash(value: &Value) -> Result<u64, String> {
    match value {
        Value::Integer(i) => i
            .as_u64()
            .or_else(|| i.as_i64().map(|s| s as u64))
            .ok_or_else(|| "integer out of range".to_owned()),
        Value::Binary(bytes) if !bytes.is_empty() => {
            let tail = &bytes[bytes.len().saturating_sub(8)..];
            Ok(tail.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
        }
        _ => Err("hash is neither an integer nor non-empty bytes".into()),
    }
}

fn hash_list(value: &Value) -> Result<Vec<u64>, String> {
    match value {
        Value::Array(items) => items.iter().map(hash).collect(),
        _ => Err("not an array".into()),
    }
}

fn token_list(value: &Value) -> Result<Vec<u32>, String> {
    let Value::Array(items) = value else {
        return Err("token_ids: not an array".into());
    };
    items
        .iter()
        .map(|t| {
            t.as_u64()
                .and_then(|t| u32::try_from(t).ok())
                .ok_or_else(|| {
                    "token_ids: not a u32 (bigram token pairs are unsupported)".to_owned()
                })
        })
        .collect()
}

fn medium(value: &Value) -> Result<Option<String>, String> {
    match value {
        Value::Nil => Ok(None),
        Value::String(s) => s
            .as_str()
            .map(|s| Some(s.to_owned()))
            .ok_or_else(|| "medium: invalid utf-8".to_owned()),
        _ => Err("medium: not a string".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmpv::Value as V;

    fn encode(value: &V) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, value).expect("encode");
        out
    }

    fn s(text: &str) -> V {
        V::from(text)
    }

    fn arr(items: Vec<V>) -> V {
        V::Array(items)
    }

    fn ints(values: &[i64]) -> V {
        arr(values.iter().map(|v| V::from(*v)).collect())
    }

    fn stored_positional(extra: Vec<V>) -> V {
        let mut items = vec![
            s(TAG_STORED),
            ints(&[-1, 7]),
            V::from(42),
            ints(&[1, 2, 3, 4]),
            V::from(2),
            V::Nil,
        ];
        items.extend(extra);
        arr(items)
    }

    fn expected_stored(medium: Option<&str>) -> WireEvent {
        WireEvent::Stored {
            block_hashes: vec![u64::MAX, 7],
            parent: Some(42),
            token_ids: vec![1, 2, 3, 4],
            block_size: 2,
            medium: medium.map(str::to_owned),
        }
    }

    #[test]
    fn two_element_batch_without_rank() {
        let batch = decode_batch(&encode(&arr(vec![
            V::F64(1.5),
            arr(vec![stored_positional(vec![])]),
        ])))
        .unwrap();
        assert_eq!(batch.ts, 1.5);
        assert_eq!(batch.dp_rank, None);
        assert_eq!(batch.events, vec![expected_stored(None)]);
    }

    #[test]
    fn three_element_batch_with_rank_and_nil_rank() {
        let with = decode_batch(&encode(&arr(vec![V::F64(2.0), arr(vec![]), V::from(3)]))).unwrap();
        assert_eq!(with.dp_rank, Some(3));
        let nil = decode_batch(&encode(&arr(vec![V::F64(2.0), arr(vec![]), V::Nil]))).unwrap();
        assert_eq!(nil.dp_rank, None);
        let longer = decode_batch(&encode(&arr(vec![
            V::from(2),
            arr(vec![]),
            V::from(1),
            s("future"),
        ])))
        .unwrap();
        assert_eq!((longer.ts, longer.dp_rank), (2.0, Some(1)));
    }

    #[test]
    fn positional_events_short_and_long() {
        // Short: BlockStored without lora_id/medium (omit_defaults), BlockRemoved without medium.
        let short_stored = arr(vec![
            s(TAG_STORED),
            ints(&[-1, 7]),
            V::from(42),
            ints(&[1, 2, 3, 4]),
            V::from(2),
        ]);
        let short_removed = arr(vec![s(TAG_REMOVED), ints(&[5])]);
        // Long: medium, lora_name, extra_keys, metadata map: extras ignored.
        let long_stored =
            stored_positional(vec![s("GPU"), s("lora"), arr(vec![V::Nil]), V::Map(vec![])]);
        let long_removed = arr(vec![
            s(TAG_REMOVED),
            ints(&[5]),
            s("CPU_PINNED"),
            V::from(9),
        ]);
        let cleared = arr(vec![s(TAG_CLEARED), V::from(1)]);
        let payload = encode(&arr(vec![
            V::F64(0.0),
            arr(vec![
                short_stored,
                short_removed,
                long_stored,
                long_removed,
                cleared,
            ]),
            V::from(0),
        ]));
        let batch = decode_batch(&payload).unwrap();
        assert_eq!(
            batch.events,
            vec![
                expected_stored(None),
                WireEvent::Removed {
                    block_hashes: vec![5],
                    medium: None
                },
                expected_stored(Some("GPU")),
                WireEvent::Removed {
                    block_hashes: vec![5],
                    medium: Some("CPU_PINNED".into())
                },
                WireEvent::Cleared,
            ]
        );
    }

    #[test]
    fn map_events() {
        let stored = V::Map(vec![
            (s("type"), s(TAG_STORED)),
            (s("block_hashes"), ints(&[-1, 7])),
            (s("parent_block_hash"), V::from(42)),
            (s("token_ids"), ints(&[1, 2, 3, 4])),
            (s("block_size"), V::from(2)),
            (s("lora_name"), V::Nil),
            (s("medium"), s("GPU")),
            (s("extra_keys"), arr(vec![])),
        ]);
        let removed = V::Map(vec![
            (s("block_hashes"), ints(&[3])),
            (s("type"), s(TAG_REMOVED)),
        ]);
        let cleared = V::Map(vec![(s("type"), s(TAG_CLEARED))]);
        let batch = decode_batch(&encode(&arr(vec![
            V::F64(0.0),
            arr(vec![stored, removed, cleared]),
        ])))
        .unwrap();
        assert_eq!(
            batch.events,
            vec![
                expected_stored(Some("GPU")),
                WireEvent::Removed {
                    block_hashes: vec![3],
                    medium: None
                },
                WireEvent::Cleared
            ]
        );
    }

    #[test]
    fn hashes_as_uint64_and_bytes() {
        let bytes_hash = V::Binary(vec![0xAA, 0, 0, 0, 0, 0, 0, 1, 2]); // last 8 bytes BE
        let short_bytes = V::Binary(vec![1, 0]);
        let removed = arr(vec![
            s(TAG_REMOVED),
            arr(vec![V::from(u64::MAX), bytes_hash, short_bytes]),
        ]);
        let stored_no_parent = arr(vec![
            s(TAG_STORED),
            arr(vec![V::Binary(vec![9; 32])]),
            V::Nil,
            ints(&[1]),
            V::from(1),
        ]);
        let batch = decode_batch(&encode(&arr(vec![
            V::F64(0.0),
            arr(vec![removed, stored_no_parent]),
        ])))
        .unwrap();
        assert_eq!(
            batch.events[0],
            WireEvent::Removed {
                block_hashes: vec![u64::MAX, 0x0102, 0x0100],
                medium: None
            }
        );
        match &batch.events[1] {
            WireEvent::Stored {
                block_hashes,
                parent,
                ..
            } => {
                assert_eq!(block_hashes, &vec![0x0909_0909_0909_0909]);
                assert_eq!(parent, &None);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn unknown_tags_are_kept_for_counting() {
        let batch = decode_batch(&encode(&arr(vec![
            V::F64(0.0),
            arr(vec![
                arr(vec![s("BlockPinned"), ints(&[1])]),
                V::Map(vec![(s("type"), s("Other"))]),
            ]),
        ])))
        .unwrap();
        assert_eq!(
            batch.events,
            vec![
                WireEvent::Unknown {
                    tag: "BlockPinned".into()
                },
                WireEvent::Unknown {
                    tag: "Other".into()
                }
            ]
        );
    }

    #[test]
    fn bad_input_is_an_error() {
        let cases: Vec<Vec<u8>> = vec![
            vec![],
            vec![0xc1],                                              // never-used marker
            encode(&V::from(5)),                                     // not an array
            encode(&arr(vec![V::F64(0.0)])),                         // too short
            encode(&arr(vec![s("x"), arr(vec![])])),                 // ts not a number
            encode(&arr(vec![V::F64(0.0), V::from(1)])),             // events not an array
            encode(&arr(vec![V::F64(0.0), arr(vec![V::from(1)])])),  // event not array/map
            encode(&arr(vec![V::F64(0.0), arr(vec![arr(vec![])])])), // no tag
            encode(&arr(vec![V::F64(0.0), arr(vec![arr(vec![s(TAG_STORED)])])])), // missing fields
            encode(&arr(vec![
                V::F64(0.0),
                arr(vec![arr(vec![
                    s(TAG_STORED),
                    ints(&[1]),
                    V::Nil,
                    ints(&[-1]),
                    V::from(1),
                ])]),
            ])),
            encode(&arr(vec![
                V::F64(0.0),
                arr(vec![arr(vec![
                    s(TAG_STORED),
                    ints(&[1]),
                    V::Nil,
                    ints(&[1]),
                    V::from(0),
                ])]),
            ])),
            encode(&arr(vec![
                V::F64(0.0),
                arr(vec![arr(vec![s(TAG_REMOVED), s("x")])]),
            ])),
            encode(&arr(vec![
                V::F64(0.0),
                arr(vec![arr(vec![s(TAG_REMOVED), ints(&[1]), V::from(3)])]),
            ])),
            encode(&arr(vec![
                V::F64(0.0),
                arr(vec![arr(vec![
                    s(TAG_STORED),
                    arr(vec![V::Binary(vec![])]),
                    V::Nil,
                    ints(&[1]),
                    V::from(1),
                ])]),
            ])),
        ];
        for (i, payload) in cases.iter().enumerate() {
            assert!(decode_batch(payload).is_err(), "case {i} should fail");
        }
        // Truncated valid payload.
        let full = encode(&arr(vec![
            V::F64(0.0),
            arr(vec![stored_positional(vec![])]),
        ]));
        for cut in 0..full.len() {
            assert!(decode_batch(&full[..cut]).is_err(), "cut at {cut}");
        }
    }
}
