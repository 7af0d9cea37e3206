//! msgpack encoding of an event batch exactly as SGLang's msgspec encoder writes it
//! (`array_like=True`, `tag=True`): `[ts, [event...], attn_dp_rank]`, each event an
//! array whose first element is the class name.
//!
//! `BlockStored = ["BlockStored", hashes, parent|nil, token_ids, block_size, nil, "GPU"]`,
//! `BlockRemoved = ["BlockRemoved", hashes, "GPU"]`, `AllBlocksCleared = ["AllBlocksCleared"]`.
//! Integers use the smallest msgpack form, non-negative ones as unsigned (as msgspec does).

use rmp::encode as mp;

use crate::mock::cache::CacheEvent;

/// Encodes one batch; `ts` is seconds since the epoch.
pub fn encode_batch(
    ts: f64,
    events: &[CacheEvent],
    block_size: usize,
    attn_dp_rank: u32,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + events.len() * 64);
    // Writes into a Vec cannot fail.
    let _ = write_batch(&mut out, ts, events, block_size, attn_dp_rank);
    out
}

fn write_batch(
    out: &mut Vec<u8>,
    ts: f64,
    events: &[CacheEvent],
    block_size: usize,
    rank: u32,
) -> Result<(), mp::ValueWriteError> {
    mp::write_array_len(out, 3)?;
    mp::write_f64(out, ts)?;
    mp::write_array_len(out, events.len() as u32)?;
    for ev in events {
        match ev {
            CacheEvent::Stored {
                hashes,
                parent,
                tokens,
            } => {
                mp::write_array_len(out, 7)?;
                mp::write_str(out, "BlockStored")?;
                write_hashes(out, hashes)?;
                match parent {
                    Some(h) => write_int(out, *h)?,
                    None => mp::write_nil(out).map_err(mp::ValueWriteError::InvalidMarkerWrite)?,
                }
                mp::write_array_len(out, tokens.len() as u32)?;
                for &t in tokens {
                    mp::write_uint(out, u64::from(t))?;
                }
                mp::write_uint(out, block_size as u64)?;
                mp::write_nil(out).map_err(mp::ValueWriteError::InvalidMarkerWrite)?;
                mp::write_str(out, "GPU")?;
            }
            CacheEvent::Removed { hashes } => {
                mp::write_array_len(out, 3)?;
                mp::write_str(out, "BlockRemoved")?;
                write_hashes(out, hashes)?;
                mp::write_str(out, "GPU")?;
            }
            CacheEvent::Cleared => {
                mp::write_array_len(out, 1)?;
                mp::write_str(out, "AllBlocksCleared")?;
            }
        }
    }
    mp::write_uint(out, u64::from(rank))?;
    Ok(())
}

fn write_hashes(out: &mut Vec<u8>, hashes: &[i64]) -> Result<(), mp::ValueWriteError> {
    mp::write_array_len(out, hashes.len() as u32)?;
    for &h in hashes {
        write_int(out, h)?;
    }
    Ok(())
}

fn write_int(out: &mut Vec<u8>, v: i64) -> Result<(), mp::ValueWriteError> {
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
    fn cleared_batch_bytes() {
        let b = encode_batch(1.5, &[CacheEvent::Cleared], 16, 2);
        let mut expect = vec![0x93, 0xcb];
        expect.extend_from_slice(&1.5f64.to_be_bytes());
        expect.extend_from_slice(&[0x91, 0x91, 0xb0]);
        expect.extend_from_slice(b"AllBlocksCleared");
        expect.push(0x02);
        assert_eq!(b, expect);
    }

    #[test]
    fn ints_use_msgspec_forms() {
        let b = encode_batch(
            0.0,
            &[CacheEvent::Removed {
                hashes: vec![-1, 200, i64::MIN],
            }],
            16,
            0,
        );
        let tail = &b[b.len() - 1 - 4 - 9 - 1 - 2 - 1..];
        // [-1 (0xff), 200 (0xcc c8), i64::MIN (0xd3 ...)] then "GPU", then rank 0
        assert_eq!(tail[0], 0x93);
        assert_eq!(tail[1], 0xff);
        assert_eq!(&tail[2..4], &[0xcc, 0xc8]);
        assert_eq!(tail[4], 0xd3);
    }
}
