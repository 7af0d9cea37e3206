//! SGLang's KV-event block hash (`mem_cache/utils.py`): a SHA-256 chain over pages,
//! `h_0 = sha256(le_u32(page_0))`, `h_i = sha256(h_{i-1} || le_u32(page_i))`, reported as
//! the first 8 digest bytes read big-endian and reinterpreted as a signed int64.

use sha2::{Digest, Sha256};

/// The 32-byte digest of one page.
pub type PageDigest = [u8; 32];

/// Digest of `page` chained after `parent` (`None` = first page of a sequence).
pub fn page_digest(parent: Option<&PageDigest>, page: &[u32]) -> PageDigest {
    let mut h = Sha256::new();
    if let Some(p) = parent {
        h.update(p);
    }
    for t in page {
        h.update(t.to_le_bytes());
    }
    h.finalize().into()
}

/// The signed int64 SGLang puts on the wire for a digest (`int(hex[:16], 16)` as int64).
pub fn event_hash(d: &PageDigest) -> i64 {
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    u64::from_be_bytes(first) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_python_reference_values() {
        // Computed with python3 hashlib as in SGLang's utils.py:
        // h0 = sha256(le32([1,2,3,4])); h1 = sha256(bytes.fromhex(h0) + le32([5,6,7,8])).
        let h0 = page_digest(None, &[1, 2, 3, 4]);
        let h1 = page_digest(Some(&h0), &[5, 6, 7, 8]);
        assert_eq!(event_hash(&h0), -3488128144981237669);
        assert_eq!(event_hash(&h1), 5674439469042975057);
    }
}
