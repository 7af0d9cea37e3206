//! Cache namespaces of SGLang 0.5.23: a request's `(extra_key, cache_salt)` keys its own
//! part of the radix tree (`RadixKey`, `mem_cache/radix_cache.py`; a LoRA request's
//! `lora_id` is appended to `extra_key` in `Req.__init__`, `managers/schedule_batch.py`),
//! and the hashes its pages publish are namespaced as the KV-event recorder does
//! (`mem_cache/events.py` `KVCacheEventRecorder`, `mem_cache/utils.py`
//! `compute_node_event_hash_values`, `disaggregation/kv_events.py`
//! `kv_event_namespace_seed` / `namespaced_block_hash`).

use sha2::{Digest, Sha256};

use super::block_hash::PageDigest;

/// The namespace a request's pages live in (empty = the plain base-model tree).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Namespace {
    /// The final `extra_key`: the request's own (empty -> none) followed by the adapter's
    /// `lora_id` for a LoRA request.
    pub extra_key: Option<String>,
    /// `cache_salt` (empty -> none).
    pub cache_salt: Option<String>,
    /// The adapter's public name when the request names one (registered for KV events,
    /// `KvEventLoraNames.register(req, lora_name)`).
    pub lora_name: Option<String>,
}

impl Namespace {
    /// `Req.__init__`: `extra_key = (extra_key or "") + lora_id` for a LoRA request;
    /// empty strings count as absent (`GenerateReqInput` normalisation).
    pub fn for_request(
        extra_key: Option<&str>,
        cache_salt: Option<&str>,
        lora: Option<(&str, &str)>,
    ) -> Namespace {
        let extra = extra_key.filter(|s| !s.is_empty());
        let extra_key = match lora {
            Some((_, id)) => Some(format!("{}{id}", extra.unwrap_or(""))),
            None => extra.map(str::to_string),
        };
        Namespace {
            extra_key,
            cache_salt: cache_salt.filter(|s| !s.is_empty()).map(str::to_string),
            lora_name: lora.map(|(name, _)| name.to_string()),
        }
    }

    /// True for the plain (un-namespaced) tree.
    pub fn is_plain(&self) -> bool {
        self.extra_key.is_none() && self.cache_salt.is_none()
    }
}

/// The tag of `kv_event_namespace_seed` (`_NAMESPACE_SEED_TAG`).
const NAMESPACE_SEED_TAG: &[u8] = b"sglang-kv-event-namespace-v1";
/// The prefix of the salted event-hash chain's seed (`compute_node_event_hash_values`).
const SALT_CHAIN_TAG: &[u8] = b"sglang-cache-salt-v1\0";

/// `kv_event_namespace_seed(extra_key=, cache_salt=)`: `None` when both are absent, else
/// SHA-256 over the tag and, per part, `0x00` (absent) or `0x01 + len (u64 LE) + utf-8`.
pub fn namespace_seed(extra_key: Option<&str>, cache_salt: Option<&str>) -> Option<PageDigest> {
    if extra_key.is_none() && cache_salt.is_none() {
        return None;
    }
    let mut h = Sha256::new();
    h.update(NAMESPACE_SEED_TAG);
    for part in [extra_key, cache_salt] {
        match part {
            None => h.update([0u8]),
            Some(s) => {
                h.update([1u8]);
                h.update((s.len() as u64).to_le_bytes());
                h.update(s.as_bytes());
            }
        }
    }
    Some(h.finalize().into())
}

/// `namespaced_block_hash`: the hash itself without a seed, else the first 8 bytes of
/// SHA-256(seed || hash as 8 big-endian bytes) as a signed int64.
pub fn namespaced_block_hash(hash: i64, seed: Option<&PageDigest>) -> i64 {
    let Some(seed) = seed else { return hash };
    let mut h = Sha256::new();
    h.update(seed);
    h.update(hash.to_be_bytes());
    let d: PageDigest = h.finalize().into();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    i64::from_be_bytes(first)
}

/// The digest a salted namespace's event-hash chain starts from:
/// `sha256(b"sglang-cache-salt-v1\0" + salt)` (`compute_node_event_hash_values`; the
/// chain omits `extra_key`, so an unsalted namespace starts from nothing, like the plain
/// tree).
pub fn salt_chain_seed(cache_salt: &str) -> PageDigest {
    let mut h = Sha256::new();
    h.update(SALT_CHAIN_TAG);
    h.update(cache_salt.as_bytes());
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lora_id_is_appended_to_extra_key() {
        let ns = Namespace::for_request(Some(""), Some(""), None);
        assert!(ns.is_plain());
        let ns = Namespace::for_request(Some("k"), None, Some(("a", "0123")));
        assert_eq!(ns.extra_key.as_deref(), Some("k0123"));
        assert_eq!(ns.lora_name.as_deref(), Some("a"));
        let ns = Namespace::for_request(None, Some("s"), Some(("a", "0123")));
        assert_eq!(ns.extra_key.as_deref(), Some("0123"));
        assert_eq!(ns.cache_salt.as_deref(), Some("s"));
    }

    #[test]
    fn seed_separates_joined_parts() {
        assert!(namespace_seed(None, None).is_none());
        assert_ne!(
            namespace_seed(Some("ab"), Some("c")),
            namespace_seed(Some("a"), Some("bc"))
        );
        assert_eq!(namespaced_block_hash(7, None), 7);
    }
}
