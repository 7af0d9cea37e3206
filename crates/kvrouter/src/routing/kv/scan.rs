//! A streaming scan of relayed response bytes for the numbers a worker reports about a request:
//! `"cached_tokens": N` (SGLang `meta_info.cached_tokens`, OpenAI
//! `usage.prompt_tokens_details.cached_tokens`), `prompt_tokens`, `completion_tokens`, and
//! SGLang's timings `e2e_latency`, `queue_time`, `prefill_launch_delay`,
//! `prefill_launch_latency` (seconds; the timings only with `--enable-metrics`, on the final
//! object). Read-only: the bytes are never altered.
//!
//! Frames may split a key or a number; a short carry of the previous frame's tail covers
//! that. Streams repeat the fields per chunk (cumulative), so the largest value seen is kept.

use memchr::memchr_iter;

/// The fields scanned for, in [`Field`] order. Each key includes its quotes, so
/// `"prompt_tokens_details"` never matches `"prompt_tokens"`.
const KEYS: [&[u8]; 7] = [
    b"\"cached_tokens\"",
    b"\"prompt_tokens\"",
    b"\"completion_tokens\"",
    b"\"e2e_latency\"",
    b"\"queue_time\"",
    b"\"prefill_launch_delay\"",
    b"\"prefill_launch_latency\"",
];

/// One scanned field (index into the scan's values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    CachedTokens = 0,
    PromptTokens = 1,
    CompletionTokens = 2,
    E2eLatency = 3,
    QueueTime = 4,
    PrefillLaunchDelay = 5,
    PrefillLaunchLatency = 6,
}

/// Enough to hold the longest key, a colon, whitespace and a 24-character number.
const CARRY: usize = 64;

/// Finds the largest value of each [`Field`] in a byte stream.
#[derive(Debug, Default, Clone)]
pub struct MetaScan {
    carry: Vec<u8>,
    best: [Option<f64>; KEYS.len()],
}

impl MetaScan {
    /// The largest value of `field` seen so far.
    pub fn get(&self, field: Field) -> Option<f64> {
        self.best[field as usize]
    }

    /// The largest `cached_tokens` seen so far.
    pub fn cached_tokens(&self) -> Option<u64> {
        // Token counts are parsed from digits only: exact up to 2^53.
        self.get(Field::CachedTokens).map(|v| v as u64)
    }

    /// Feeds the next relayed chunk.
    pub fn feed(&mut self, chunk: &[u8]) {
        if self.carry.is_empty() {
            self.scan(chunk, chunk.len());
        } else {
            let mut joined = std::mem::take(&mut self.carry);
            let carried = joined.len();
            joined.extend_from_slice(&chunk[..chunk.len().min(CARRY)]);
            // Only matches starting inside the carry (later ones are found in `chunk` itself).
            self.scan(&joined, carried);
            self.scan(chunk, chunk.len());
        }
        let keep = chunk.len().min(CARRY);
        self.carry.clear();
        self.carry.extend_from_slice(&chunk[chunk.len() - keep..]);
    }

    /// Scans `buf` for keys starting before `limit`; a number cut at the end of `buf` is skipped.
    fn scan(&mut self, buf: &[u8], limit: usize) {
        for start in memchr_iter(b'"', &buf[..limit]) {
            let rest = &buf[start..];
            let Some(k) = KEYS.iter().position(|key| rest.starts_with(key)) else {
                continue;
            };
            let mut i = start + KEYS[k].len();
            while i < buf.len() && matches!(buf[i], b' ' | b'\t' | b'\r' | b'\n') {
                i += 1;
            }
            if buf.get(i) != Some(&b':') {
                continue;
            }
            i += 1;
            while i < buf.len() && matches!(buf[i], b' ' | b'\t' | b'\r' | b'\n') {
                i += 1;
            }
            let len = buf[i..]
                .iter()
                .take_while(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
                .count();
            if len == 0 || i + len == buf.len() {
                continue; // no number, or possibly cut: the next feed sees it whole
            }
            let parsed = std::str::from_utf8(&buf[i..i + len])
                .ok()
                .and_then(|s| s.parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v >= 0.0);
            if let Some(v) = parsed {
                self.best[k] = Some(self.best[k].map_or(v, |b| b.max(v)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_and_split_bodies() {
        let body = br#"{"text":"x","meta_info":{"prompt_tokens":10,"queue_time":0.25,"prefill_launch_latency":1.5e-2,"cached_tokens": 48,"completion_tokens":7,"id":"a","e2e_latency":0.92}}"#;
        let mut s = MetaScan::default();
        s.feed(body);
        assert_eq!(s.cached_tokens(), Some(48));
        assert_eq!(s.get(Field::PromptTokens), Some(10.0));
        assert_eq!(s.get(Field::CompletionTokens), Some(7.0));
        assert_eq!(s.get(Field::QueueTime), Some(0.25));
        assert_eq!(s.get(Field::PrefillLaunchLatency), Some(0.015));
        assert_eq!(s.get(Field::E2eLatency), Some(0.92));
        assert_eq!(s.get(Field::PrefillLaunchDelay), None);
        for cut in 1..body.len() {
            let mut s = MetaScan::default();
            s.feed(&body[..cut]);
            s.feed(&body[cut..]);
            assert_eq!(s.cached_tokens(), Some(48), "cut at {cut}");
            assert_eq!(s.get(Field::E2eLatency), Some(0.92), "cut at {cut}");
            assert_eq!(
                s.get(Field::PrefillLaunchLatency),
                Some(0.015),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn streams_keep_the_largest_and_ignore_other_keys() {
        let mut s = MetaScan::default();
        s.feed(b"data: {\"meta_info\":{\"cached_tokens\":16}}\n\n");
        s.feed(b"data: {\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":32}}}\n\n");
        s.feed(b"data: {\"not_cached_tokens\":99,\"cached_tokens_x\":7}\n\n");
        assert_eq!(s.cached_tokens(), Some(32));
        assert_eq!(s.get(Field::PromptTokens), None);
        let mut none = MetaScan::default();
        none.feed(b"{\"cached_tokens\":null,\"e2e_latency\":-1,\"queue_time\":\"x\"}");
        assert_eq!(none.cached_tokens(), None);
        assert_eq!(none.get(Field::E2eLatency), None);
        assert_eq!(none.get(Field::QueueTime), None);
    }
}
