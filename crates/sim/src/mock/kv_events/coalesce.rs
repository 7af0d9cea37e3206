//! Merging of one batch's events as SGLang's `KVCacheEventRecorder.enqueue`
//! (`mem_cache/events.py`) merges them: an event joins the queue's tail when both are
//! `BlockRemoved` with the same `medium`, or both are `BlockStored` with the same medium,
//! block size and namespace labels and the new store's `parent_block_hash` is the tail's
//! last hash. SGLang's queue is drained once per scheduler step (`take`), so folding a
//! step's events in order gives the same result.

use crate::mock::cache::CacheEvent;

/// The events of one batch, merged as SGLang's recorder merges them.
pub fn coalesce(events: Vec<CacheEvent>) -> Vec<CacheEvent> {
    let mut out: Vec<CacheEvent> = Vec::with_capacity(events.len());
    for ev in events {
        if let Some(tail) = out.last_mut() {
            if merge_into(tail, &ev) {
                continue;
            }
        }
        out.push(ev);
    }
    out
}

/// Appends `ev` to `tail` when SGLang would; returns whether it did.
fn merge_into(tail: &mut CacheEvent, ev: &CacheEvent) -> bool {
    match (tail, ev) {
        (
            CacheEvent::Removed { hashes, medium },
            CacheEvent::Removed {
                hashes: more,
                medium: m,
            },
        ) if medium == m => {
            hashes.extend_from_slice(more);
            true
        }
        (
            CacheEvent::Stored {
                hashes,
                tokens,
                medium,
                cache_salt,
                lora_name,
                ..
            },
            CacheEvent::Stored {
                hashes: more,
                parent,
                tokens: more_tokens,
                medium: m,
                cache_salt: salt,
                lora_name: name,
            },
        ) if medium == m
            && cache_salt == salt
            && lora_name == name
            && hashes.last().is_some()
            && parent.as_ref() == hashes.last() =>
        {
            hashes.extend_from_slice(more);
            tokens.extend_from_slice(more_tokens);
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::cache::Medium;

    #[test]
    fn links_stores_and_same_medium_removals() {
        let evs = vec![
            CacheEvent::stored(vec![1, 2], None, vec![0; 8]),
            CacheEvent::stored(vec![3], Some(2), vec![0; 4]),
            CacheEvent::stored(vec![9], None, vec![0; 4]),
            CacheEvent::stored(vec![10], Some(3), vec![0; 4]),
            CacheEvent::removed(vec![3]),
            CacheEvent::removed(vec![1, 2]),
            CacheEvent::Removed {
                hashes: vec![7],
                medium: Medium::CpuPinned,
            },
            CacheEvent::Cleared,
            CacheEvent::Cleared,
        ];
        let out = coalesce(evs);
        assert_eq!(out.len(), 7);
        assert!(
            matches!(&out[0], CacheEvent::Stored { hashes, tokens, .. } if hashes == &[1, 2, 3] && tokens.len() == 12)
        );
        // parent 3 is not the tail's last hash (9): a new event
        assert!(matches!(&out[2], CacheEvent::Stored { hashes, .. } if hashes == &[10]));
        assert_eq!(out[3], CacheEvent::removed(vec![3, 1, 2]));
        assert!(matches!(
            &out[4],
            CacheEvent::Removed {
                medium: Medium::CpuPinned,
                ..
            }
        ));
        assert_eq!(&out[5..], &[CacheEvent::Cleared, CacheEvent::Cleared]);
    }

    #[test]
    fn different_namespaces_stay_apart() {
        let salted = CacheEvent::Stored {
            hashes: vec![5],
            parent: Some(2),
            tokens: vec![0; 4],
            medium: Medium::Gpu,
            cache_salt: Some("t".into()),
            lora_name: None,
        };
        let out = coalesce(vec![
            CacheEvent::stored(vec![1, 2], None, vec![0; 8]),
            salted,
        ]);
        assert_eq!(out.len(), 2);
    }
}
