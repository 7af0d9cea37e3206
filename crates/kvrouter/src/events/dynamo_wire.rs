//! Decoder of Dynamo `RouterEvent`s, as JSON or msgpack (named fields), bare or
//! wrapped in Dynamo's event-plane `EventEnvelope` (msgpack map whose `payload`
//! bytes hold the `RouterEvent`).
//!
//! `RouterEvent { worker_id, storage_tier?, event: { event_id, dp_rank?, data } }`
//! with `data` = `{"stored": {parent_hash, blocks: [{block_hash, tokens_hash}]}}`
//! | `{"removed": {block_hashes}}` | `"cleared"` (or `{"cleared": ..}`).
//! Hashes are bare u64 (negative ints are bit-cast). Malformed input is an error.

use rmpv::Value;

/// One decoded Dynamo KV event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamoEvent {
    /// Dynamo's worker (instance) id.
    pub worker_id: u64,
    /// Per-publisher event id (contiguous, starting at 1).
    pub event_id: u64,
    pub dp_rank: u32,
    /// False when `storage_tier` names a tier other than the device (GPU).
    pub on_device: bool,
    pub data: DynamoData,
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

/// Decodes a `RouterEvent` from JSON, msgpack, or a msgpack `EventEnvelope`.
pub fn decode_router_event(payload: &[u8]) -> Result<DynamoEvent, DynamoDecodeError> {
    let value = parse_any(payload)?;
    let value = match envelope_payload(&value) {
        Some(inner) => parse_any(inner)?,
        None => value,
    };
    router_event(&value).map_err(DynamoDecodeError::Shape)
}

fn parse_any(payload: &[u8]) -> Result<Value, DynamoDecodeError> {
    let first = payload.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'{') {
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
    let on_device = match field(value, "storage_tier") {
        None => true,
        Some(tier) => {
            let tier = tier.as_str().ok_or("storage_tier is not a string")?;
            matches!(tier.to_ascii_lowercase().as_str(), "device" | "gpu")
        }
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
        on_device,
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
mod tests {
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
}
