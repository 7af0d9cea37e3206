//! Decoder of Dynamo `RouterEvent`s, as JSON or msgpack (named fields), bare or
//! wrapped in Dynamo's event-plane `EventEnvelope` (msgpack map whose `payload`
//! bytes hold a msgpack **array** of `RouterEvent`s; a single map is accepted too).
//!
//! `RouterEvent { worker_id, storage_tier?, residency_domain?, event: { event_id, dp_rank?,
//! data } }` with `data` = `{"stored": {parent_hash, start_position?, blocks: [{block_hash,
//! tokens_hash, mm_extra_info?}]}}` | `{"removed": {block_hashes}}` | `"cleared"` (or
//! `{"cleared": ..}`). Hashes are bare u64 (negative ints are bit-cast). Malformed input is
//! an error. The shape is checked against bytes Dynamo 1.6.1's own `KvEventPublisher` put
//! on the wire (tests/data/dynamo-1.6.1, see its README): envelope per
//! `lib/runtime/src/transports/event_plane/codec.rs` (`rmp_serde::to_vec_named`), events per
//! `dynamo_kv_router::protocols::RouterEvent`.

use rmpv::Value;

/// One decoded Dynamo KV event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamoEvent {
    /// Dynamo's worker (instance) id.
    pub worker_id: u64,
    /// Per-publisher event id (contiguous, starting at 1).
    pub event_id: u64,
    pub dp_rank: u32,
    /// True for a GPU-resident block of this worker: `tier` is the device and the
    /// `residency_domain` is the worker. Anything else is not a GPU hit on the worker
    /// (the feed skips it after the cursor, counted in `ignored{reason="medium"}`).
    pub on_device: bool,
    /// Dynamo's `storage_tier` (the seam for a tier-aware index: it is decoded and kept
    /// here, only `on_device` is acted on today).
    pub tier: DynamoTier,
    pub data: DynamoData,
}

/// Dynamo's `StorageTier` (`device`, `host_pinned`, `disk`, ...; absent = device). Dynamo
/// 1.6.1 relays SGLang's `medium` `CPU_PINNED` as `host_pinned`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DynamoTier {
    Device,
    HostPinned,
    Disk,
    External,
    /// A tier name this decoder does not know (never a GPU hit).
    Other,
}

impl DynamoTier {
    /// The tier a `storage_tier` string names (case and `_` insensitive; `gpu` = device).
    pub fn parse(name: &str) -> DynamoTier {
        let key: String = name
            .chars()
            .filter(|c| *c != '_' && *c != '-')
            .map(|c| c.to_ascii_lowercase())
            .collect();
        match key.as_str() {
            "device" | "gpu" => DynamoTier::Device,
            "hostpinned" | "host" | "cpu" | "cpupinned" => DynamoTier::HostPinned,
            "disk" => DynamoTier::Disk,
            "external" => DynamoTier::External,
            _ => DynamoTier::Other,
        }
    }

    /// Label value for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            DynamoTier::Device => "device",
            DynamoTier::HostPinned => "host_pinned",
            DynamoTier::Disk => "disk",
            DynamoTier::External => "external",
            DynamoTier::Other => "other",
        }
    }
}

/// The event payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DynamoData {
    Stored {
        parent: Option<u64>,
        block_hashes: Vec<u64>,
        /// Dynamo `tokens_hash` (LocalBlockHash) of each block.
        local_hashes: Vec<u64>,
    },
    Removed {
        block_hashes: Vec<u64>,
    },
    Cleared,
}

/// Why a payload could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DynamoDecodeError {
    #[error("not JSON: {0}")]
    Json(String),
    #[error("not msgpack: {0}")]
    Msgpack(String),
    #[error("router event: {0}")]
    Shape(String),
}

/// Most `RouterEvent`s one payload may carry (a bigger batch is an error, not an allocation).
pub const MAX_BATCH: usize = 4096;

/// Decodes the `RouterEvent`s of one message, in order: JSON, msgpack, or a msgpack
/// `EventEnvelope`, whose payload (or the bare value) is an array of events or one event.
/// Any malformed element fails the whole message.
pub fn decode_router_events(payload: &[u8]) -> Result<Vec<DynamoEvent>, DynamoDecodeError> {
    let value = parse_any(payload)?;
    let value = match envelope_payload(&value) {
        Some(inner) => parse_any(inner)?,
        None => value,
    };
    match &value {
        Value::Array(items) if items.len() > MAX_BATCH => Err(DynamoDecodeError::Shape(format!(
            "batch of {} events (at most {MAX_BATCH})",
            items.len()
        ))),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                router_event(item).map_err(|e| DynamoDecodeError::Shape(format!("event {i}: {e}")))
            })
            .collect(),
        single => Ok(vec![router_event(single).map_err(DynamoDecodeError::Shape)?]),
    }
}

/// Decodes a message that must carry exactly one `RouterEvent` (see [`decode_router_events`]).
pub fn decode_router_event(payload: &[u8]) -> Result<DynamoEvent, DynamoDecodeError> {
    let mut events = decode_router_events(payload)?;
    match events.len() {
        1 => Ok(events.remove(0)),
        n => Err(DynamoDecodeError::Shape(format!(
            "expected one router event, got {n}"
        ))),
    }
}

fn parse_any(payload: &[u8]) -> Result<Value, DynamoDecodeError> {
    let first = payload.iter().find(|b| !b.is_ascii_whitespace());
    if matches!(first, Some(b'{') | Some(b'[')) {
        let json: serde_json::Value =
            serde_json::from_slice(payload).map_err(|e| DynamoDecodeError::Json(e.to_string()))?;
        Ok(json_to_msgpack(json))
    } else {
        let mut reader = payload;
        rmpv::decode::read_value(&mut reader).map_err(|e| DynamoDecodeError::Msgpack(e.to_string()))
    }
}

/// The `payload` bytes of an event-plane envelope, when `value` is one.
fn envelope_payload(value: &Value) -> Option<&[u8]> {
    let Value::Map(_) = value else { return None };
    field(value, "publisher_id")?;
    match field(value, "payload")? {
        Value::Binary(bytes) => Some(bytes),
        _ => None,
    }
}

fn json_to_msgpack(json: serde_json::Value) -> Value {
    use serde_json::Value as J;
    match json {
        J::Null => Value::Nil,
        J::Bool(b) => Value::Boolean(b),
        J::Number(n) => n
            .as_u64()
            .map(Value::from)
            .or_else(|| n.as_i64().map(Value::from))
            .unwrap_or_else(|| Value::F64(n.as_f64().unwrap_or(f64::NAN))),
        J::String(s) => Value::from(s),
        J::Array(items) => Value::Array(items.into_iter().map(json_to_msgpack).collect()),
        J::Object(map) => Value::Map(
            map.into_iter()
                .map(|(k, v)| (Value::from(k), json_to_msgpack(v)))
                .collect(),
        ),
    }
}

fn field<'a>(value: &'a Value, name: &str) -> Option<&'a Value> {
    match value {
        Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| k.as_str() == Some(name))
            .map(|(_, v)| v)
            .filter(|v| !v.is_nil()),
        _ => None,
    }
}

fn uint(value: &Value, what: &str) -> Result<u64, String> {
    value
        .as_u64()
        .ok_or_else(|| format!("{what} is not an unsigned integer"))
}

/// A hash: bare u64 (negative ints are bit-cast, as engines send int64).
fn hash(value: &Value, what: &str) -> Result<u64, String> {
    match value {
        Value::Integer(i) => i
            .as_u64()
            .or_else(|| i.as_i64().map(|s| s as u64))
            .ok_or_else(|| format!("{what}: integer out of range")),
        _ => Err(format!("{what}: not an integer")),
    }
}

fn router_event(value: &Value) -> Result<DynamoEvent, String> {
    let worker_id = uint(
        field(value, "worker_id").ok_or("missing worker_id")?,
        "worker_id",
    )?;
    let tier = match field(value, "storage_tier") {
        None => DynamoTier::Device,
        Some(tier) => DynamoTier::parse(tier.as_str().ok_or("storage_tier is not a string")?),
    };
    // `worker` (1.6.1 always sends it) or absent: the blocks live in this worker's cache.
    // Any other domain (a shared pool) is not a hit on the worker.
    let on_worker = match field(value, "residency_domain") {
        None => true,
        Some(domain) => domain
            .as_str()
            .is_some_and(|d| d.eq_ignore_ascii_case("worker")),
    };
    let event = field(value, "event").ok_or("missing event")?;
    let event_id = uint(
        field(event, "event_id").ok_or("missing event.event_id")?,
        "event_id",
    )?;
    let dp_rank = match field(event, "dp_rank").or_else(|| field(value, "dp_rank")) {
        None => 0,
        Some(r) => u32::try_from(uint(r, "dp_rank")?).map_err(|_| "dp_rank out of range")?,
    };
    let data = event_data(field(event, "data").ok_or("missing event.data")?)?;
    Ok(DynamoEvent {
        worker_id,
        event_id,
        dp_rank,
        on_device: tier == DynamoTier::Device && on_worker,
        tier,
        data,
    })
}

fn event_data(value: &Value) -> Result<DynamoData, String> {
    if let Some(name) = value.as_str() {
        return match name.to_ascii_lowercase().as_str() {
            "cleared" => Ok(DynamoData::Cleared),
            other => Err(format!("unknown unit variant {other:?}")),
        };
    }
    let Value::Map(pairs) = value else {
        return Err("data is neither a string nor a map".into());
    };
    let [(key, body)] = pairs.as_slice() else {
        return Err("data must have exactly one variant key".into());
    };
    match key.as_str().map(str::to_ascii_lowercase).as_deref() {
        Some("cleared") => Ok(DynamoData::Cleared),
        Some("removed") => {
            let Some(Value::Array(items)) = field(body, "block_hashes") else {
                return Err("removed.block_hashes is not an array".into());
            };
            let block_hashes = items
                .iter()
                .map(|h| hash(h, "removed.block_hashes"))
                .collect::<Result<_, _>>()?;
            Ok(DynamoData::Removed { block_hashes })
        }
        Some("stored") => {
            let parent = field(body, "parent_hash")
                .map(|p| hash(p, "stored.parent_hash"))
                .transpose()?;
            let Some(Value::Array(blocks)) = field(body, "blocks") else {
                return Err("stored.blocks is not an array".into());
            };
            let mut block_hashes = Vec::with_capacity(blocks.len());
            let mut local_hashes = Vec::with_capacity(blocks.len());
            for block in blocks {
                let engine = field(block, "block_hash").ok_or("stored block without block_hash")?;
                let local =
                    field(block, "tokens_hash").ok_or("stored block without tokens_hash")?;
                block_hashes.push(hash(engine, "block_hash")?);
                local_hashes.push(hash(local, "tokens_hash")?);
            }
            Ok(DynamoData::Stored {
                parent,
                block_hashes,
                local_hashes,
            })
        }
        _ => Err(format!("unknown data variant {key}")),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    fn stored_json() -> serde_json::Value {
        json!({
            "worker_id": 7,
            "event": {
                "event_id": 3,
                "data": {"stored": {"parent_hash": 11, "start_position": 0, "blocks": [
                    {"block_hash": 12, "tokens_hash": 14643705804678351452u64},
                    {"block_hash": 13, "tokens_hash": 16777012769546811212u64, "mm_extra_info": null}
                ]}},
                "dp_rank": 1
            }
        })
    }

    fn to_msgpack(json: &serde_json::Value) -> Vec<u8> {
        rmp_serde::to_vec_named(json).expect("encode")
    }

    #[test]
    fn stored_from_json_and_msgpack() {
        let expected = DynamoEvent {
            worker_id: 7,
            event_id: 3,
            dp_rank: 1,
            on_device: true,
            tier: DynamoTier::Device,
            data: DynamoData::Stored {
                parent: Some(11),
                block_hashes: vec![12, 13],
                local_hashes: vec![14643705804678351452, 16777012769546811212],
            },
        };
        let json = serde_json::to_vec(&stored_json()).unwrap();
        assert_eq!(decode_router_event(&json).unwrap(), expected);
        assert_eq!(
            decode_router_event(&to_msgpack(&stored_json())).unwrap(),
            expected
        );
    }

    #[test]
    fn removed_cleared_and_defaults() {
        let removed = json!({"worker_id": 1, "event": {"event_id": 1, "data": {"removed": {"block_hashes": [1, -1]}}}});
        let ev = decode_router_event(removed.to_string().as_bytes()).unwrap();
        assert_eq!(
            ev.data,
            DynamoData::Removed {
                block_hashes: vec![1, u64::MAX]
            }
        );
        assert_eq!(ev.dp_rank, 0);
        let cleared = json!({"worker_id": 1, "storage_tier": "HostPinned", "event": {"event_id": 2, "data": "cleared"}});
        let ev = decode_router_event(&to_msgpack(&cleared)).unwrap();
        assert_eq!(ev.data, DynamoData::Cleared);
        assert!(!ev.on_device);
        let cleared_map =
            json!({"worker_id": 1, "event": {"event_id": 2, "data": {"cleared": null}}});
        assert_eq!(
            decode_router_event(cleared_map.to_string().as_bytes())
                .unwrap()
                .data,
            DynamoData::Cleared
        );
        let no_parent = json!({"worker_id": 1, "event": {"event_id": 2, "data": {"stored": {"parent_hash": null, "blocks": []}}}});
        assert!(matches!(
            decode_router_event(no_parent.to_string().as_bytes())
                .unwrap()
                .data,
            DynamoData::Stored { parent: None, .. }
        ));
    }

    #[test]
    fn event_plane_envelope() {
        let envelope = rmpv::Value::Map(vec![
            (rmpv::Value::from("topic"), rmpv::Value::from("kv-events")),
            (rmpv::Value::from("publisher_id"), rmpv::Value::from(99)),
            (rmpv::Value::from("sequence"), rmpv::Value::from(5)),
            (
                rmpv::Value::from("published_at"),
                rmpv::Value::from(1_700_000_000_000u64),
            ),
            (
                rmpv::Value::from("payload"),
                rmpv::Value::Binary(to_msgpack(&stored_json())),
            ),
        ]);
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, &envelope).unwrap();
        let ev = decode_router_event(&bytes).unwrap();
        assert_eq!((ev.worker_id, ev.event_id), (7, 3));
    }

    #[test]
    fn bad_input_is_an_error() {
        let cases = [
            json!({}),
            json!({"worker_id": "x", "event": {"event_id": 1, "data": "cleared"}}),
            json!({"worker_id": 1}),
            json!({"worker_id": 1, "event": {"data": "cleared"}}),
            json!({"worker_id": 1, "event": {"event_id": 1, "data": "exploded"}}),
            json!({"worker_id": 1, "event": {"event_id": 1, "data": {"stored": {"blocks": [{"block_hash": 1}]}}}}),
            json!({"worker_id": 1, "event": {"event_id": 1, "data": {"removed": {}}}}),
            json!({"worker_id": 1, "event": {"event_id": 1, "data": {"stored": {}, "removed": {}}}}),
            json!({"worker_id": 1, "event": {"event_id": 1, "dp_rank": 1u64 << 40, "data": "cleared"}}),
        ];
        for (i, case) in cases.iter().enumerate() {
            assert!(
                decode_router_event(case.to_string().as_bytes()).is_err(),
                "json case {i}"
            );
            assert!(
                decode_router_event(&to_msgpack(case)).is_err(),
                "msgpack case {i}"
            );
        }
        for bytes in [&b""[..], b"{", b"\xc1", b"[1,2]", b"   {\"worker_id\": 1"] {
            assert!(decode_router_event(bytes).is_err());
        }
    }

    /// Bytes of one fixture line's `hex` field (the envelope Dynamo 1.6.1 sent).
    pub(crate) fn fixture_envelopes(jsonl: &str) -> Vec<Vec<u8>> {
        jsonl
            .lines()
            .map(|line| {
                let row: serde_json::Value = serde_json::from_str(line).unwrap();
                let hex = row["hex"].as_str().unwrap();
                (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                    .collect()
            })
            .collect()
    }

    pub(crate) const NATS: &str = include_str!("../../tests/data/dynamo-1.6.1/nats.jsonl");
    pub(crate) const ZMQ: &str = include_str!("../../tests/data/dynamo-1.6.1/zmq.jsonl");
    pub(crate) const RELAY: &str = include_str!("../../tests/data/dynamo-1.6.1/relay.jsonl");

    fn decode_fixture(jsonl: &str) -> Vec<DynamoEvent> {
        fixture_envelopes(jsonl)
            .iter()
            .flat_map(|bytes| {
                let events = decode_router_events(bytes).unwrap();
                assert_eq!(events.len(), 1, "1.6.1 sends one event per batch");
                events
            })
            .collect()
    }

    /// (worker, event_id, kind, engine hashes) of each event.
    fn summary(events: &[DynamoEvent]) -> Vec<(u64, u64, &'static str, Vec<u64>)> {
        events
            .iter()
            .map(|e| {
                let (kind, hashes) = match &e.data {
                    DynamoData::Stored { block_hashes, .. } => ("stored", block_hashes.clone()),
                    DynamoData::Removed { block_hashes } => ("removed", block_hashes.clone()),
                    DynamoData::Cleared => ("cleared", vec![]),
                };
                (e.worker_id, e.event_id, kind, hashes)
            })
            .collect()
    }

    #[test]
    fn dynamo_161_manual_publisher_nats_and_zmq() {
        let expected = vec![
            (1, 1, "stored", vec![0x1000, 0x1001]),
            (1, 2, "stored", vec![0x2000, 0x2001]),
            (1, 3, "removed", vec![0x2001]),
            (1, 4, "stored", vec![0x3000]),
            (2, 1, "stored", vec![0x5000, 0x5001, 0x5002]),
            (2, 2, "removed", vec![0x5002]),
        ];
        for (name, file) in [("nats", NATS), ("zmq", ZMQ)] {
            let events = decode_fixture(file);
            assert_eq!(summary(&events), expected, "{name}");
            assert!(events.iter().all(|e| e.on_device && e.dp_rank == 0));
            assert!(events.iter().all(|e| e.tier == DynamoTier::Device));
            let DynamoData::Stored {
                parent,
                local_hashes,
                ..
            } = &events[1].data
            else {
                panic!("{name}: B is a store")
            };
            assert_eq!(*parent, Some(0x1001), "{name}: B chains on A[1]");
            // Dynamo's tokens_hash is the router's own page hash (xxh3-64, seed 1337).
            let b0: Vec<u32> = (1032..1048).collect();
            assert_eq!(local_hashes[0], kvrouter_index::local_hash(&b0), "{name}");
        }
    }

    #[test]
    fn dynamo_161_relay_of_an_sglang_stream() {
        let events = decode_fixture(RELAY);
        assert_eq!(
            summary(&events),
            vec![
                (3, 1, "stored", vec![0x7000, 0x7001]),
                (3, 2, "stored", vec![0x7002]),
                (3, 3, "stored", vec![0x8000]),
                (3, 4, "removed", vec![0x7002]),
                (3, 5, "cleared", vec![]),
                (3, 6, "stored", vec![0x7000, 0x7001]),
            ]
        );
        // SGLang's medium CPU_PINNED comes out as storage_tier host_pinned: not a GPU hit.
        let tiers: Vec<_> = events.iter().map(|e| (e.tier, e.on_device)).collect();
        assert_eq!(tiers[2], (DynamoTier::HostPinned, false));
        assert!(tiers
            .iter()
            .enumerate()
            .all(|(i, t)| i == 2 || *t == (DynamoTier::Device, true)));
    }

    #[test]
    fn batches_tiers_and_residency() {
        let one = stored_json();
        let mut other_domain = stored_json();
        other_domain["residency_domain"] = json!("shared_pool");
        let batch = json!([one, other_domain]);
        let events = decode_router_events(&to_msgpack(&batch)).unwrap();
        assert_eq!(events.len(), 2);
        assert!(events[0].on_device);
        assert!(
            !events[1].on_device,
            "a shared pool is not the worker's GPU"
        );
        assert_eq!(events[1].tier, DynamoTier::Device);
        assert!(decode_router_event(&to_msgpack(&batch)).is_err());
        assert_eq!(decode_router_events(b"[]").unwrap(), vec![]);
        let bad_second = json!([stored_json(), {"worker_id": 1}]);
        let err = decode_router_events(&to_msgpack(&bad_second)).unwrap_err();
        assert!(err.to_string().contains("event 1"), "{err}");
        for (name, tier) in [
            ("device", DynamoTier::Device),
            ("GPU", DynamoTier::Device),
            ("host_pinned", DynamoTier::HostPinned),
            ("HostPinned", DynamoTier::HostPinned),
            ("disk", DynamoTier::Disk),
            ("external", DynamoTier::External),
            ("tape", DynamoTier::Other),
        ] {
            assert_eq!(DynamoTier::parse(name), tier, "{name}");
        }
    }
}
