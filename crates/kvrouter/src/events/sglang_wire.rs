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

use rmp::Marker;

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
        /// The store's namespace fields (tagged-map events only; absent = default).
        namespace: WireNamespace,
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

/// The namespace fields of a SGLang 0.5.23 `BlockStored` (`disaggregation/kv_events.py`):
/// its hashes are namespaced by them (see `tokens::namespace`). `session_id` is attribution
/// only (the hash does not depend on it) and is not kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WireNamespace {
    pub cache_salt: Option<String>,
    pub lora_name: Option<String>,
    pub lora_id: Option<i64>,
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

/// Decodes one msgpack-encoded SGLang event batch. Streams over the bytes (no
/// intermediate value tree); elements after the rank are not even parsed.
pub fn decode_batch(payload: &[u8]) -> Result<SglangBatch, SglangDecodeError> {
    let mut rd = Reader { rest: payload };
    let len = rd.array_len().map_err(|_| SglangDecodeError::BadBatch)?;
    if len < 2 {
        return Err(SglangDecodeError::BadBatch);
    }
    let ts = rd.number().map_err(|_| SglangDecodeError::BadTimestamp)?;
    let count = rd.array_len().map_err(|_| SglangDecodeError::BadBatch)?;
    let mut events = Vec::with_capacity(count.min(1024));
    for index in 0..count {
        let event = rd
            .event()
            .map_err(|reason| SglangDecodeError::BadEvent { index, reason })?;
        events.push(event);
    }
    let dp_rank = match len {
        2 => None,
        _ => rd
            .optional_uint()
            .ok()
            .flatten()
            .and_then(|r| u32::try_from(r).ok()),
    };
    Ok(SglangBatch {
        ts,
        events,
        dp_rank,
    })
}

/// Fields of one event, whichever encoding carried them.
#[derive(Default)]
struct EventFields<'a> {
    block_hashes: Option<Vec<u64>>,
    parent: Option<u64>,
    token_ids: Option<Vec<u32>>,
    block_size: Option<u64>,
    medium: Option<&'a str>,
    cache_salt: Option<&'a str>,
    lora_name: Option<&'a str>,
    lora_id: Option<i64>,
}

/// Nesting limit when skipping unknown fields.
const MAX_SKIP_DEPTH: usize = 64;

/// A msgpack cursor over a byte slice.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Result<Marker, String> {
        self.rest
            .first()
            .map(|b| Marker::from_u8(*b))
            .ok_or_else(|| "truncated".to_owned())
    }

    fn array_len(&mut self) -> Result<usize, String> {
        rmp::decode::read_array_len(&mut self.rest)
            .map(|n| n as usize)
            .map_err(|_| "expected an array".to_owned())
    }

    fn map_len(&mut self) -> Result<usize, String> {
        rmp::decode::read_map_len(&mut self.rest)
            .map(|n| n as usize)
            .map_err(|_| "expected a map".to_owned())
    }

    fn str(&mut self) -> Result<&'a str, String> {
        let (text, rest) = rmp::decode::read_str_from_slice(self.rest)
            .map_err(|_| "expected a utf-8 string".to_owned())?;
        self.rest = rest;
        Ok(text)
    }

    /// Consumes a nil if one is next.
    fn nil(&mut self) -> bool {
        if self.peek() == Ok(Marker::Null) {
            self.rest = &self.rest[1..];
            true
        } else {
            false
        }
    }

    fn uint(&mut self) -> Result<u64, String> {
        rmp::decode::read_int(&mut self.rest).map_err(|_| "expected an unsigned integer".to_owned())
    }

    fn optional_uint(&mut self) -> Result<Option<u64>, String> {
        if self.nil() {
            return Ok(None);
        }
        self.uint().map(Some)
    }

    fn number(&mut self) -> Result<f64, String> {
        match self.peek()? {
            Marker::F64 => rmp::decode::read_f64(&mut self.rest).map_err(|e| e.to_string()),
            Marker::F32 => rmp::decode::read_f32(&mut self.rest)
                .map(f64::from)
                .map_err(|e| e.to_string()),
            Marker::U64 => self.uint().map(|v| v as f64),
            _ => rmp::decode::read_int::<i64, _>(&mut self.rest)
                .map(|v| v as f64)
                .map_err(|_| "expected a number".to_owned()),
        }
    }

    /// An engine hash: int (int64 bit-cast or uint64) or bytes (last 8, big-endian).
    fn hash(&mut self) -> Result<u64, String> {
        match self.peek()? {
            Marker::U64 => self.uint(),
            Marker::Bin8 | Marker::Bin16 | Marker::Bin32 => {
                let len =
                    rmp::decode::read_bin_len(&mut self.rest).map_err(|e| e.to_string())? as usize;
                if len == 0 || len > self.rest.len() {
                    return Err("hash bytes empty or truncated".into());
                }
                let (bytes, rest) = self.rest.split_at(len);
                self.rest = rest;
                let tail = &bytes[len.saturating_sub(8)..];
                Ok(tail.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
            }
            _ => rmp::decode::read_int::<i64, _>(&mut self.rest)
                .map(|v| v as u64)
                .map_err(|_| "hash is neither an integer nor bytes".to_owned()),
        }
    }

    fn hashes(&mut self) -> Result<Vec<u64>, String> {
        let n = self.array_len()?;
        let mut out = Vec::with_capacity(n.min(self.rest.len()));
        for _ in 0..n {
            out.push(self.hash()?);
        }
        Ok(out)
    }

    fn tokens(&mut self) -> Result<Vec<u32>, String> {
        let n = self.array_len()?;
        let mut out = Vec::with_capacity(n.min(self.rest.len()));
        for _ in 0..n {
            let token = match self.fast_u32() {
                Some(token) => token,
                None => rmp::decode::read_int::<u32, _>(&mut self.rest).map_err(|_| {
                    "token_ids: not a u32 (bigram token pairs are unsupported)".to_owned()
                })?,
            };
            out.push(token);
        }
        Ok(out)
    }

    /// Hot path for token ids: positive fixint, uint8, uint16 and uint32 markers
    /// read in place (msgpack's compact encodings); anything else -> None.
    #[inline]
    fn fast_u32(&mut self) -> Option<u32> {
        let (value, width) = match *self.rest {
            [b, ..] if b < 0x80 => (u32::from(b), 1),
            [0xcc, b, ..] => (u32::from(b), 2),
            [0xcd, b0, b1, ..] => (u32::from(u16::from_be_bytes([b0, b1])), 3),
            [0xce, b0, b1, b2, b3, ..] => (u32::from_be_bytes([b0, b1, b2, b3]), 5),
            _ => return None,
        };
        self.rest = &self.rest[width..];
        Some(value)
    }

    fn medium(&mut self) -> Result<Option<&'a str>, String> {
        self.optional_str("medium")
    }

    /// A string field that may be nil.
    fn optional_str(&mut self, field: &str) -> Result<Option<&'a str>, String> {
        if self.nil() {
            return Ok(None);
        }
        self.str()
            .map(Some)
            .map_err(|_| format!("{field}: not a string"))
    }

    /// `lora_id`: nil or an integer.
    fn lora_id(&mut self) -> Result<Option<i64>, String> {
        if self.nil() {
            return Ok(None);
        }
        rmp::decode::read_int::<i64, _>(&mut self.rest)
            .map(Some)
            .map_err(|_| "lora_id: not an integer".to_owned())
    }

    /// Skips one value of any type.
    fn skip(&mut self) -> Result<(), String> {
        rmpv::decode::read_value_ref_with_max_depth(&mut self.rest, MAX_SKIP_DEPTH)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn event(&mut self) -> Result<WireEvent, String> {
        match self.peek()? {
            Marker::FixArray(_) | Marker::Array16 | Marker::Array32 => self.positional_event(),
            Marker::FixMap(_) | Marker::Map16 | Marker::Map32 => self.named_event(),
            _ => Err("event is neither an array nor a map".into()),
        }
    }

    /// `[tag, field1, field2, ...]`: schema by tag, missing fields nil, extras skipped.
    fn positional_event(&mut self) -> Result<WireEvent, String> {
        let len = self.array_len()?;
        if len == 0 {
            return Err("array event without a tag".into());
        }
        let tag = self
            .str()
            .map_err(|_| "array event without a string tag".to_owned())?;
        let mut fields = EventFields::default();
        for position in 1..len {
            match (tag, position) {
                (TAG_STORED, 1) | (TAG_REMOVED, 1) => {
                    fields.block_hashes =
                        Some(self.hashes().map_err(|e| format!("block_hashes: {e}"))?)
                }
                (TAG_STORED, 2) => fields.parent = self.parent()?,
                (TAG_STORED, 3) => fields.token_ids = Some(self.tokens()?),
                (TAG_STORED, 4) => {
                    fields.block_size = self
                        .optional_uint()
                        .map_err(|e| format!("block_size: {e}"))?
                }
                (TAG_STORED, 6) | (TAG_REMOVED, 2) => fields.medium = self.medium()?,
                _ => self.skip()?,
            }
        }
        build(tag, fields)
    }

    /// `{"type": tag, name: value, ...}` in any order; unknown keys skipped.
    fn named_event(&mut self) -> Result<WireEvent, String> {
        let len = self.map_len()?;
        let mut tag = None;
        let mut fields = EventFields::default();
        for _ in 0..len {
            let key = match self.peek()? {
                Marker::FixStr(_) | Marker::Str8 | Marker::Str16 | Marker::Str32 => self.str()?,
                _ => {
                    self.skip()?;
                    self.skip()?;
                    continue;
                }
            };
            match key {
                "type" => {
                    tag = Some(
                        self.str()
                            .map_err(|_| "\"type\" is not a string".to_owned())?,
                    )
                }
                "block_hashes" => {
                    fields.block_hashes =
                        Some(self.hashes().map_err(|e| format!("block_hashes: {e}"))?)
                }
                "parent_block_hash" => fields.parent = self.parent()?,
                "token_ids" => fields.token_ids = Some(self.tokens()?),
                "block_size" => {
                    fields.block_size = self
                        .optional_uint()
                        .map_err(|e| format!("block_size: {e}"))?
                }
                "medium" => fields.medium = self.medium()?,
                "cache_salt" => fields.cache_salt = self.optional_str("cache_salt")?,
                "lora_name" => fields.lora_name = self.optional_str("lora_name")?,
                "lora_id" => fields.lora_id = self.lora_id()?,
                _ => self.skip()?,
            }
        }
        build(tag.ok_or("map event without a string \"type\"")?, fields)
    }

    fn parent(&mut self) -> Result<Option<u64>, String> {
        if self.nil() {
            return Ok(None);
        }
        self.hash()
            .map(Some)
            .map_err(|e| format!("parent_block_hash: {e}"))
    }
}

/// Builds the event named `tag` from its fields, checking the required ones.
fn build(tag: &str, fields: EventFields<'_>) -> Result<WireEvent, String> {
    let medium = fields.medium.map(str::to_owned);
    match tag {
        TAG_STORED => Ok(WireEvent::Stored {
            block_hashes: fields.block_hashes.ok_or("block_hashes: not an array")?,
            parent: fields.parent,
            token_ids: fields.token_ids.ok_or("token_ids: not an array")?,
            block_size: fields
                .block_size
                .and_then(|b| u32::try_from(b).ok())
                .filter(|b| *b > 0)
                .ok_or("block_size missing or not a positive integer")?,
            medium,
            namespace: WireNamespace {
                cache_salt: fields.cache_salt.map(str::to_owned),
                lora_name: fields.lora_name.map(str::to_owned),
                lora_id: fields.lora_id,
            },
        }),
        TAG_REMOVED => Ok(WireEvent::Removed {
            block_hashes: fields.block_hashes.ok_or("block_hashes: not an array")?,
            medium,
        }),
        TAG_CLEARED => Ok(WireEvent::Cleared),
        other => Ok(WireEvent::Unknown {
            tag: other.to_owned(),
        }),
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
            namespace: WireNamespace::default(),
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

    #[test]
    fn namespace_fields_of_0_5_23_stores() {
        // SGLang 0.5.23, omit_defaults: salt / session / adapter name present only when set.
        let stored = V::Map(vec![
            (s("type"), s(TAG_STORED)),
            (s("block_hashes"), ints(&[-1, 7])),
            (s("parent_block_hash"), V::from(42)),
            (s("token_ids"), ints(&[1, 2, 3, 4])),
            (s("block_size"), V::from(2)),
            (s("lora_id"), V::Nil),
            (s("medium"), s("GPU")),
            (s("cache_salt"), s("tenant-1")),
            (s("session_id"), s("sess")),
            (s("lora_name"), s("adapterA")),
        ]);
        let with_id = V::Map(vec![
            (s("type"), s(TAG_STORED)),
            (s("block_hashes"), ints(&[-1, 7])),
            (s("parent_block_hash"), V::from(42)),
            (s("token_ids"), ints(&[1, 2, 3, 4])),
            (s("block_size"), V::from(2)),
            (s("lora_id"), V::from(-3)),
        ]);
        let batch =
            decode_batch(&encode(&arr(vec![V::F64(0.0), arr(vec![stored, with_id])]))).unwrap();
        let mut salted = expected_stored(Some("GPU"));
        if let WireEvent::Stored { namespace, .. } = &mut salted {
            *namespace = WireNamespace {
                cache_salt: Some("tenant-1".into()),
                lora_name: Some("adapterA".into()),
                lora_id: None,
            };
        }
        let mut by_id = expected_stored(None);
        if let WireEvent::Stored { namespace, .. } = &mut by_id {
            namespace.lora_id = Some(-3);
        }
        assert_eq!(batch.events, vec![salted, by_id]);
        // A salt of the wrong type is a decode error, not a silent default.
        let bad = V::Map(vec![
            (s("type"), s(TAG_STORED)),
            (s("block_hashes"), ints(&[1])),
            (s("token_ids"), ints(&[1, 2])),
            (s("block_size"), V::from(2)),
            (s("cache_salt"), V::from(5)),
        ]);
        assert!(decode_batch(&encode(&arr(vec![V::F64(0.0), arr(vec![bad])]))).is_err());
    }
}
