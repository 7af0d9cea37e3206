//! SGLang's KV-event wire format written from its spec on `rmpv`, independent of `src/`:
//! a decoder (for what the mock publishes) and batch builders (for fake publishers).

use std::io::Cursor;

use rmpv::Value as V;

/// One decoded event.
#[derive(Debug, Clone, PartialEq)]
pub enum Ev {
    Stored {
        hashes: Vec<i64>,
        parent: Option<i64>,
        tokens: Vec<u64>,
        block_size: u64,
        medium: Option<String>,
    },
    Removed {
        hashes: Vec<i64>,
    },
    Cleared,
}

/// A decoded batch `[ts, events, attn_dp_rank]`.
#[derive(Debug, Clone)]
pub struct Batch {
    pub seq: u64,
    pub ts: f64,
    pub events: Vec<Ev>,
    pub rank: Option<i64>,
}

fn as_i64(v: &V) -> i64 {
    v.as_i64()
        .or_else(|| v.as_u64().map(|u| u as i64))
        .expect("integer")
}

fn hashes(v: &V) -> Vec<i64> {
    v.as_array().expect("hashes").iter().map(as_i64).collect()
}

/// Decodes a msgpack payload with rmpv, following the spec (tagged maps or arrays).
pub fn decode_payload(payload: &[u8]) -> (f64, Vec<Ev>, Option<i64>) {
    let v = rmpv::decode::read_value(&mut Cursor::new(payload)).expect("valid msgpack");
    let outer = v.as_array().expect("batch is an array");
    assert!(outer.len() >= 2, "batch has ts and events");
    let ts = outer[0].as_f64().expect("ts is a float");
    let rank = outer.get(2).map(as_i64);
    let events = outer[1]
        .as_array()
        .expect("events array")
        .iter()
        .map(decode_event)
        .collect();
    (ts, events, rank)
}

/// One event: a msgspec tagged map (`{"type": ..., field: ...}`, SGLang 0.5.23) or a
/// positional array (`["BlockStored", ...]`, the 0.5.9-era shape).
fn decode_event(e: &V) -> Ev {
    if let Some(map) = e.as_map() {
        let get = |k: &str| {
            map.iter()
                .find(|(key, _)| key.as_str() == Some(k))
                .map(|(_, v)| v)
        };
        let ty = get("type").and_then(|v| v.as_str()).expect("type tag");
        return match ty {
            "BlockStored" => Ev::Stored {
                hashes: hashes(get("block_hashes").expect("block_hashes")),
                parent: get("parent_block_hash").filter(|v| !v.is_nil()).map(as_i64),
                tokens: tokens(get("token_ids").expect("token_ids")),
                block_size: get("block_size")
                    .and_then(|v| v.as_u64())
                    .expect("block_size"),
                medium: get("medium").and_then(|m| m.as_str().map(str::to_string)),
            },
            "BlockRemoved" => Ev::Removed {
                hashes: hashes(get("block_hashes").expect("block_hashes")),
            },
            "AllBlocksCleared" => Ev::Cleared,
            other => panic!("unknown tag {other}"),
        };
    }
    let a = e.as_array().expect("event is a map or an array");
    match a[0].as_str().expect("tag string first") {
        "BlockStored" => Ev::Stored {
            hashes: hashes(&a[1]),
            parent: if a[2].is_nil() {
                None
            } else {
                Some(as_i64(&a[2]))
            },
            tokens: tokens(&a[3]),
            block_size: a[4].as_u64().expect("block_size"),
            medium: a.get(6).and_then(|m| m.as_str().map(str::to_string)),
        },
        "BlockRemoved" => Ev::Removed {
            hashes: hashes(&a[1]),
        },
        "AllBlocksCleared" => Ev::Cleared,
        other => panic!("unknown tag {other}"),
    }
}

fn tokens(v: &V) -> Vec<u64> {
    v.as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_u64().expect("token"))
        .collect()
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
