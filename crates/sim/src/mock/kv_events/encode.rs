//! msgpack encoding of an event batch exactly as SGLang's msgspec encoder writes it.
//!
//! The batch is always the positional `EventBatch` (`array_like=True`):
//! `[ts, [event...], attn_dp_rank]`. Events take one of two shapes:
//!
//! * [`EventFormat::Tagged`] (SGLang 0.5.23, the default): `KVCacheEvent` is a
//!   `msgspec.Struct` with `tag=True, omit_defaults=True` (`disaggregation/kv_events.py`),
//!   so each event is a map whose first key `type` holds the class name, then the fields
//!   in declaration order. `BlockStored` always carries `block_hashes`,
//!   `parent_block_hash`, `token_ids`, `block_size` and `lora_id` (no defaults; `lora_id`
//!   is always nil, `KVCacheEventRecorder.record_store`), then `medium` (always set by
//!   the recorder), then `cache_salt`, `session_id`, `lora_name` only when set (the mock
//!   never sets `session_id`). `BlockRemoved` = `{type, block_hashes, medium}`,
//!   `AllBlocksCleared` = `{type}`.
//! * [`EventFormat::Positional`] (the 0.5.9-era shape, `array_like=True` events):
//!   `["BlockStored", hashes, parent|nil, token_ids, block_size, nil, medium]`,
//!   `["BlockRemoved", hashes, medium]`, `["AllBlocksCleared"]`.
//!
//! Integers use the smallest msgpack form, non-negative ones as unsigned (as msgspec
//! does). Checked byte for byte against SGLang's own classes by
//! `tests/mock/kv_events_fixture.rs` (fixture from `tests/data/gen_kv_events.py`).

use rmp::encode as mp;

use crate::mock::cache::CacheEvent;
use crate::mock::config::EventFormat;

type W = Result<(), mp::ValueWriteError>;

/// Encodes one batch; `ts` is seconds since the epoch.
pub fn encode_batch(
    ts: f64,
    events: &[CacheEvent],
    block_size: usize,
    attn_dp_rank: u32,
    format: EventFormat,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + events.len() * 96);
    // Writes into a Vec cannot fail.
    let _ = write_batch(&mut out, ts, events, block_size, attn_dp_rank, format);
    out
}

fn write_batch(
    out: &mut Vec<u8>,
    ts: f64,
    events: &[CacheEvent],
    block_size: usize,
    rank: u32,
    format: EventFormat,
) -> W {
    mp::write_array_len(out, 3)?;
    mp::write_f64(out, ts)?;
    mp::write_array_len(out, events.len() as u32)?;
    for ev in events {
        match format {
            EventFormat::Tagged => write_tagged(out, ev, block_size)?,
            EventFormat::Positional => write_positional(out, ev, block_size)?,
        }
    }
    mp::write_uint(out, u64::from(rank))?;
    Ok(())
}

fn write_tagged(out: &mut Vec<u8>, ev: &CacheEvent, block_size: usize) -> W {
    match ev {
        CacheEvent::Stored {
            hashes,
            parent,
            tokens,
            medium,
            cache_salt,
            lora_name,
        } => {
            let n = 7 + u32::from(cache_salt.is_some()) + u32::from(lora_name.is_some());
            mp::write_map_len(out, n)?;
            key_str(out, "type", "BlockStored")?;
            mp::write_str(out, "block_hashes")?;
            write_hashes(out, hashes)?;
            mp::write_str(out, "parent_block_hash")?;
            write_opt_int(out, *parent)?;
            mp::write_str(out, "token_ids")?;
            write_tokens(out, tokens)?;
            mp::write_str(out, "block_size")?;
            mp::write_uint(out, block_size as u64)?;
            mp::write_str(out, "lora_id")?;
            nil(out)?;
            key_str(out, "medium", medium.as_str())?;
            if let Some(s) = cache_salt {
                key_str(out, "cache_salt", s)?;
            }
            if let Some(s) = lora_name {
                key_str(out, "lora_name", s)?;
            }
        }
        CacheEvent::Removed { hashes, medium } => {
            mp::write_map_len(out, 3)?;
            key_str(out, "type", "BlockRemoved")?;
            mp::write_str(out, "block_hashes")?;
            write_hashes(out, hashes)?;
            key_str(out, "medium", medium.as_str())?;
        }
        CacheEvent::Cleared => {
            mp::write_map_len(out, 1)?;
            key_str(out, "type", "AllBlocksCleared")?;
        }
    }
    Ok(())
}

fn write_positional(out: &mut Vec<u8>, ev: &CacheEvent, block_size: usize) -> W {
    match ev {
        CacheEvent::Stored {
            hashes,
            parent,
            tokens,
            medium,
            ..
        } => {
            mp::write_array_len(out, 7)?;
            mp::write_str(out, "BlockStored")?;
            write_hashes(out, hashes)?;
            write_opt_int(out, *parent)?;
            write_tokens(out, tokens)?;
            mp::write_uint(out, block_size as u64)?;
            nil(out)?;
            mp::write_str(out, medium.as_str())?;
        }
        CacheEvent::Removed { hashes, medium } => {
            mp::write_array_len(out, 3)?;
            mp::write_str(out, "BlockRemoved")?;
            write_hashes(out, hashes)?;
            mp::write_str(out, medium.as_str())?;
        }
        CacheEvent::Cleared => {
            mp::write_array_len(out, 1)?;
            mp::write_str(out, "AllBlocksCleared")?;
        }
    }
    Ok(())
}

fn key_str(out: &mut Vec<u8>, key: &str, value: &str) -> W {
    mp::write_str(out, key)?;
    mp::write_str(out, value)
}

fn nil(out: &mut Vec<u8>) -> W {
    mp::write_nil(out).map_err(mp::ValueWriteError::InvalidMarkerWrite)
}

fn write_opt_int(out: &mut Vec<u8>, v: Option<i64>) -> W {
    match v {
        Some(h) => write_int(out, h),
        None => nil(out),
    }
}

fn write_tokens(out: &mut Vec<u8>, tokens: &[u32]) -> W {
    mp::write_array_len(out, tokens.len() as u32)?;
    for &t in tokens {
        mp::write_uint(out, u64::from(t))?;
    }
    Ok(())
}

fn write_hashes(out: &mut Vec<u8>, hashes: &[i64]) -> W {
    mp::write_array_len(out, hashes.len() as u32)?;
    for &h in hashes {
        write_int(out, h)?;
    }
    Ok(())
}

fn write_int(out: &mut Vec<u8>, v: i64) -> W {
    if v >= 0 {
        mp::write_uint(out, v as u64).map(|_| ())
    } else {
        mp::write_sint(out, v).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleared_batch_bytes_both_shapes() {
        let b = encode_batch(1.5, &[CacheEvent::Cleared], 16, 2, EventFormat::Positional);
        let mut expect = vec![0x93, 0xcb];
        expect.extend_from_slice(&1.5f64.to_be_bytes());
        expect.extend_from_slice(&[0x91, 0x91, 0xb0]);
        expect.extend_from_slice(b"AllBlocksCleared");
        expect.push(0x02);
        assert_eq!(b, expect);
        let b = encode_batch(1.5, &[CacheEvent::Cleared], 16, 2, EventFormat::Tagged);
        let mut expect = vec![0x93, 0xcb];
        expect.extend_from_slice(&1.5f64.to_be_bytes());
        expect.extend_from_slice(&[0x91, 0x81, 0xa4]);
        expect.extend_from_slice(b"type");
        expect.push(0xb0);
        expect.extend_from_slice(b"AllBlocksCleared");
        expect.push(0x02);
        assert_eq!(b, expect);
    }

    #[test]
    fn ints_use_msgspec_forms() {
        let b = encode_batch(
            0.0,
            &[CacheEvent::removed(vec![-1, 200, i64::MIN])],
            16,
            0,
            EventFormat::Positional,
        );
        let tail = &b[b.len() - 1 - 4 - 9 - 1 - 2 - 1..];
        // [-1 (0xff), 200 (0xcc c8), i64::MIN (0xd3 ...)] then "GPU", then rank 0
        assert_eq!(tail[0], 0x93);
        assert_eq!(tail[1], 0xff);
        assert_eq!(&tail[2..4], &[0xcc, 0xc8]);
        assert_eq!(tail[4], 0xd3);
    }

    #[test]
    fn format_names() {
        assert_eq!("tagged".parse::<EventFormat>(), Ok(EventFormat::Tagged));
        assert_eq!(
            "positional".parse::<EventFormat>(),
            Ok(EventFormat::Positional)
        );
        assert!("arrays".parse::<EventFormat>().is_err());
    }
}
