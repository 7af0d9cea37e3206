//! Block namespaces: the key that keeps one prompt's pages apart per cache salt and LoRA
//! adapter, shared by the event side (a `BlockStored`'s `cache_salt` / `lora_name`) and the
//! request side (`cache_salt` / `lora_path` / `extra_key`).
//!
//! SGLang 0.5.23 keys its radix tree by `(extra_key, cache_salt)` (`RadixKey`; `Req.__init__`
//! in `managers/schedule_batch.py` appends the adapter's `lora_id` to `extra_key`), so a
//! request only hits pages stored under its own namespace. Its `BlockStored` tells a router
//! the salt and the adapter's public name (`disaggregation/kv_events.py` `BlockStored`;
//! `mem_cache/events.py` `KVCacheEventRecorder.record_store`), never the `extra_key`. The
//! router mixes the namespace key into the chained sequence hash *before the first page*
//! (the key is the first page's virtual parent), so the whole chain is namespaced and
//! `None` leaves today's hashes bit for bit.
//!
//! Cases the events cannot express map to keys the other side never produces (a safe
//! under-approximation: no false hit, possibly a missed one):
//! - a request with an `extra_key` (alone or with an adapter): the key includes it, and no
//!   event carries one;
//! - an event with a `lora_id` but no `lora_name`: the key includes the id, and no request
//!   carries one.

use xxhash_rust::xxh3::Xxh3;

use super::hash::{SeqHash, XXH3_SEED};

/// Domain tag of namespace keys (change it and every namespaced hash changes).
const NAMESPACE_TAG: &[u8] = b"kvrouter-kv-namespace-v1";

/// What decides a block's namespace. Empty strings count as absent (SGLang normalises an
/// empty `cache_salt` / `extra_key` to `None`, and an empty `lora_path` selects no adapter).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NamespaceParts<'a> {
    /// `cache_salt` of the request / of the store.
    pub cache_salt: Option<&'a str>,
    /// The adapter: a request's `lora_path` (SGLang resolves it by name) or a store's
    /// `lora_name`.
    pub lora: Option<&'a str>,
    /// A request's `extra_key` (requests only: events never carry it).
    pub extra_key: Option<&'a str>,
    /// A store's `lora_id` when it has no `lora_name` (events only: requests never carry it).
    pub lora_id: Option<i64>,
}

impl NamespaceParts<'_> {
    /// The namespace key: `None` for the default namespace (no salt, no adapter, no extra
    /// key), else a 64-bit digest of the parts with presence bytes and length prefixes (so
    /// `("a", "bc")` and `("ab", "c")` differ).
    pub fn key(&self) -> Option<SeqHash> {
        fn nonempty(s: Option<&str>) -> Option<&str> {
            s.filter(|s| !s.is_empty())
        }
        let (salt, lora, extra) = (
            nonempty(self.cache_salt),
            nonempty(self.lora),
            nonempty(self.extra_key),
        );
        if salt.is_none() && lora.is_none() && extra.is_none() && self.lora_id.is_none() {
            return None;
        }
        let mut h = Xxh3::with_seed(XXH3_SEED);
        h.update(NAMESPACE_TAG);
        for part in [salt, lora, extra] {
            match part {
                None => h.update(&[0]),
                Some(s) => {
                    h.update(&[1]);
                    h.update(&(s.len() as u64).to_le_bytes());
                    h.update(s.as_bytes());
                }
            }
        }
        match self.lora_id {
            None => h.update(&[0]),
            Some(id) => {
                h.update(&[1]);
                h.update(&id.to_le_bytes());
            }
        }
        Some(h.digest())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::{seq_hashes, seq_hashes_into};

    fn key(salt: Option<&str>, lora: Option<&str>) -> Option<SeqHash> {
        NamespaceParts {
            cache_salt: salt,
            lora,
            ..Default::default()
        }
        .key()
    }

    #[test]
    fn default_namespace_has_no_key_and_keeps_todays_hashes() {
        assert_eq!(key(None, None), None);
        assert_eq!(key(Some(""), Some("")), None);
        let tokens: Vec<u32> = (0..48).collect();
        let mut out = Vec::new();
        seq_hashes_into(key(None, None), &tokens, 16, &mut out);
        assert_eq!(out, seq_hashes(&tokens, 16));
    }

    #[test]
    fn parts_are_length_prefixed_and_positional() {
        let all = [
            key(Some("a"), None),
            key(None, Some("a")),
            key(Some("a"), Some("bc")),
            key(Some("ab"), Some("c")),
            NamespaceParts {
                extra_key: Some("a"),
                ..Default::default()
            }
            .key(),
            NamespaceParts {
                lora_id: Some(7),
                ..Default::default()
            }
            .key(),
        ];
        for (i, a) in all.iter().enumerate() {
            assert!(a.is_some());
            for b in &all[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // The same parts from either side give the same key.
        assert_eq!(key(Some("tenant-1"), None), key(Some("tenant-1"), None));
    }

    #[test]
    fn a_namespaced_chain_differs_from_page_one() {
        let tokens: Vec<u32> = (0..32).collect();
        let mut salted = Vec::new();
        seq_hashes_into(key(Some("t"), None), &tokens, 16, &mut salted);
        let plain = seq_hashes(&tokens, 16);
        assert_ne!(salted[0], plain[0]);
        assert_ne!(salted[1], plain[1]);
    }
}
