//! A streaming scan of relayed response bytes for the worker-reported prefix hit:
//! `"cached_tokens": N` (SGLang `meta_info.cached_tokens`, OpenAI
//! `usage.prompt_tokens_details.cached_tokens`). Read-only: the bytes are never altered.
//!
//! Frames may split the key or the number; a short carry of the previous frame's tail covers
//! that. Streams repeat the field per chunk (cumulative), so the largest value seen is kept.

const KEY: &[u8] = b"\"cached_tokens\"";
/// Enough to hold the key, a colon, whitespace and a 20-digit number.
const CARRY: usize = 48;

/// Finds the largest `"cached_tokens": N` in a byte stream.
#[derive(Debug, Default, Clone)]
pub struct CachedTokensScan {
    carry: Vec<u8>,
    best: Option<u64>,
}

impl CachedTokensScan {
    /// The largest value seen so far.
    pub fn value(&self) -> Option<u64> {
        self.best
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
        let mut from = 0;
        while let Some(pos) = find(&buf[from..], KEY) {
            let start = from + pos;
            if start >= limit {
                break;
            }
            from = start + KEY.len();
            let mut i = from;
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
            let digits = buf[i..].iter().take_while(|b| b.is_ascii_digit()).count();
            if digits == 0 || i + digits == buf.len() {
                continue; // no number, or possibly cut: the next feed sees it whole
            }
            if let Some(v) = std::str::from_utf8(&buf[i..i + digits])
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
            {
                self.best = Some(self.best.map_or(v, |b| b.max(v)));
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_and_split_bodies() {
        let body = br#"{"text":"x","meta_info":{"prompt_tokens":10,"cached_tokens": 48,"id":"a"}}"#;
        let mut s = CachedTokensScan::default();
        s.feed(body);
        assert_eq!(s.value(), Some(48));
        for cut in 1..body.len() {
            let mut s = CachedTokensScan::default();
            s.feed(&body[..cut]);
            s.feed(&body[cut..]);
            assert_eq!(s.value(), Some(48), "cut at {cut}");
        }
    }

    #[test]
    fn streams_keep_the_largest_and_ignore_other_keys() {
        let mut s = CachedTokensScan::default();
        s.feed(b"data: {\"meta_info\":{\"cached_tokens\":16}}\n\n");
        s.feed(b"data: {\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":32}}}\n\n");
        s.feed(b"data: {\"not_cached_tokens\":99,\"cached_tokens_x\":7}\n\n");
        assert_eq!(s.value(), Some(32));
        let mut none = CachedTokensScan::default();
        none.feed(b"{\"cached_tokens\":null}");
        assert_eq!(none.value(), None);
    }
}
