//! `trace`: replay of a Mooncake-format JSONL trace. Each line has `timestamp` (ms),
//! `input_length`, `output_length` and `hash_ids`; every hash id becomes one block
//! of `block_size` deterministic tokens (the same id always the same tokens), the
//! blocks are concatenated and cut to `input_length`. Requests are sent at
//! `timestamp * time_scale` (simulated time) after the start, open loop.

use std::io::BufRead;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;

use crate::loadgen::config::TraceConfig;
use crate::loadgen::request::RequestSpec;
use crate::loadgen::runner::Runner;
use crate::loadgen::synth::{self, Domain};
use crate::loadgen::workloads::open_loop;

/// One line of a Mooncake trace.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct TraceEntry {
    /// Arrival time, ms since the first request.
    pub timestamp: f64,
    pub input_length: u64,
    pub output_length: u64,
    /// Prefix block ids, one per block of the trace's block size.
    #[serde(default)]
    pub hash_ids: Vec<u64>,
}

/// Reads up to `max` entries (blank lines skipped); an error names the bad line.
pub fn parse(reader: impl BufRead, max: usize) -> anyhow::Result<Vec<TraceEntry>> {
    let mut entries = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        if entries.len() >= max {
            break;
        }
        let line = line.with_context(|| format!("line {}", n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let entry: TraceEntry =
            serde_json::from_str(&line).with_context(|| format!("line {}", n + 1))?;
        if !entry.timestamp.is_finite() || entry.timestamp < 0.0 {
            anyhow::bail!("line {}: timestamp must be a finite number >= 0", n + 1);
        }
        entries.push(entry);
    }
    Ok(entries)
}

/// `parse` of the file at `path`.
pub fn load(path: &Path, max: usize) -> anyhow::Result<Vec<TraceEntry>> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot open trace {}", path.display()))?;
    parse(std::io::BufReader::new(file), max)
        .with_context(|| format!("bad trace {}", path.display()))
}

/// Prompt tokens of entry number `index`: its hash-id blocks, cut to `input_length`;
/// tokens past the last hash id (if any) are unique to the entry.
pub fn entry_tokens(entry: &TraceEntry, index: u64, block_size: u32, seed: u64) -> Vec<u32> {
    let total = entry.input_length as usize;
    let mut tokens = Vec::with_capacity(total);
    for &id in &entry.hash_ids {
        let len = (total - tokens.len()).min(block_size as usize);
        if len == 0 {
            break;
        }
        synth::extend(&mut tokens, seed, Domain::TraceBlock, id, len);
    }
    let rest = total - tokens.len();
    synth::extend(&mut tokens, seed, Domain::TraceTail, index, rest);
    tokens
}

/// The request of entry `index`; `scheduled` is its replay time from the start.
pub fn entry_request(
    entry: &TraceEntry,
    index: u64,
    cfg: &TraceConfig,
    seed: u64,
    max_new_tokens_cap: u32,
    scheduled: Duration,
) -> RequestSpec {
    let out = entry.output_length.clamp(1, u64::from(max_new_tokens_cap)) as u32;
    RequestSpec {
        tag: format!("trace{index}"),
        input_ids: entry_tokens(entry, index, cfg.block_size, seed).into(),
        max_new_tokens: out,
        sampling_seed: Some(seed.wrapping_add(index)),
        routing_key: None,
        affinity: conversation_affinity(entry, index),
        scheduled,
        batch: None,
        text_segments: None,
    }
}

/// Sticky-pick key of an entry: a hash of its first two hash ids. In Mooncake traces
/// the first id is often a prefix every request shares, the second tells conversations apart.
pub fn conversation_affinity(entry: &TraceEntry, index: u64) -> u64 {
    if entry.hash_ids.is_empty() {
        return index;
    }
    let key: Vec<u8> = entry
        .hash_ids
        .iter()
        .take(2)
        .flat_map(|id| id.to_le_bytes())
        .collect();
    xxhash_rust::xxh3::xxh3_64(&key)
}

/// Replay offset of a timestamp, relative to the first entry's.
pub fn replay_offset(timestamp: f64, first: f64, time_scale: f64) -> Duration {
    Duration::from_secs_f64(((timestamp - first) * time_scale / 1000.0).max(0.0))
}

/// Replays `entries`; at most `concurrency` requests are materialised at a time.
pub async fn run(
    runner: &Runner,
    cfg: &TraceConfig,
    entries: &[TraceEntry],
    seed: u64,
    max_new_tokens_cap: u32,
    concurrency: usize,
) {
    let Some(first) = entries.first().map(|e| e.timestamp) else {
        return;
    };
    let offsets = entries
        .iter()
        .map(|e| replay_offset(e.timestamp, first, cfg.time_scale));
    open_loop::run(runner, concurrency, offsets, |index, wall_offset| {
        let entry = &entries[index];
        entry_request(
            entry,
            index as u64,
            cfg,
            seed,
            max_new_tokens_cap,
            wall_offset,
        )
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(input_length: u64, hash_ids: Vec<u64>) -> TraceEntry {
        TraceEntry {
            timestamp: 0.0,
            input_length,
            output_length: 10,
            hash_ids,
        }
    }

    #[test]
    fn parses_mooncake_lines() {
        let text = "{\"timestamp\": 0, \"input_length\": 6758, \"output_length\": 500, \"hash_ids\": [0, 1, 2]}\n\n{\"timestamp\": 27.5, \"input_length\": 10, \"output_length\": 3, \"hash_ids\": [0]}\n";
        let entries = parse(text.as_bytes(), 10).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].hash_ids, vec![0, 1, 2]);
        assert_eq!(entries[1].timestamp, 27.5);
        assert_eq!(parse(text.as_bytes(), 1).unwrap().len(), 1);
    }

    #[test]
    fn bad_lines_are_named() {
        let err = parse(
            "{\"timestamp\":0,\"input_length\":1,\"output_length\":1}\nnope\n".as_bytes(),
            10,
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("line 2"), "{err:#}");
        let err = parse(
            "{\"timestamp\":-1,\"input_length\":1,\"output_length\":1}".as_bytes(),
            10,
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("line 1"), "{err:#}");
    }

    #[test]
    fn identical_hash_ids_become_identical_blocks() {
        let a = entry_tokens(&entry(40, vec![0, 1, 2]), 0, 16, 3);
        let b = entry_tokens(&entry(40, vec![0, 1, 9]), 1, 16, 3);
        assert_eq!((a.len(), b.len()), (40, 40));
        assert_eq!(a[..32], b[..32]);
        assert_ne!(a[32..], b[32..]);
        // A block is the same wherever it appears.
        let c = entry_tokens(&entry(16, vec![1]), 2, 16, 3);
        assert_eq!(c[..], a[16..32]);
    }

    #[test]
    fn last_block_is_truncated_and_missing_blocks_are_unique() {
        let short = entry_tokens(&entry(20, vec![4, 5, 6]), 0, 16, 3);
        assert_eq!(short.len(), 20);
        let full = entry_tokens(&entry(48, vec![4, 5, 6]), 0, 16, 3);
        assert_eq!(short[..], full[..20]);
        let padded_a = entry_tokens(&entry(40, vec![4]), 0, 16, 3);
        let padded_b = entry_tokens(&entry(40, vec![4]), 1, 16, 3);
        assert_eq!(padded_a.len(), 40);
        assert_eq!(padded_a[..16], padded_b[..16]);
        assert_ne!(padded_a[16..], padded_b[16..]);
    }

    #[test]
    fn requests_cap_output_and_scale_time() {
        let cfg = TraceConfig::new("x");
        let mut e = entry(8, vec![1]);
        e.output_length = 500;
        let r = entry_request(&e, 3, &cfg, 0, 64, Duration::ZERO);
        assert_eq!(r.max_new_tokens, 64);
        e.output_length = 0;
        assert_eq!(
            entry_request(&e, 3, &cfg, 0, 64, Duration::ZERO).max_new_tokens,
            1
        );
        assert_eq!(replay_offset(2000.0, 0.0, 0.01), Duration::from_millis(20));
        assert_eq!(replay_offset(2000.0, 1000.0, 1.0), Duration::from_secs(1));
        assert_eq!(replay_offset(5.0, 10.0, 1.0), Duration::ZERO);
    }

    #[test]
    fn affinity_follows_the_first_two_blocks() {
        let a = conversation_affinity(&entry(40, vec![0, 1, 2]), 0);
        assert_eq!(a, conversation_affinity(&entry(60, vec![0, 1, 7, 8]), 1));
        assert_ne!(a, conversation_affinity(&entry(40, vec![0, 3, 2]), 2));
        assert_eq!(conversation_affinity(&entry(4, vec![]), 9), 9);
    }
}
