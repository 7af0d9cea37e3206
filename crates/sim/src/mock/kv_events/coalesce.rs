//! The per-version shaping of one batch's events before encoding: SGLang 0.5.23 merges
//! them ([`coalesce`]), SGLang 0.5.9 publishes one event per page ([`per_page`]).
//!
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

/// The events of one batch split to one page each, as SGLang 0.5.9 publishes them
/// (`mem_cache/radix_cache.py` `_record_store_event` / `_record_remove_event`: "One
/// BlockStored per ``page_size`` chunk", each page's `parent_block_hash` the previous page's
/// hash, the node's first page keeping the node's parent; "One BlockRemoved per chunk").
/// A store's tokens are cut `page_size` at a time, page `i` taking `tokens[i*page..]`.
pub fn per_page(events: Vec<CacheEvent>, page_size: usize) -> Vec<CacheEvent> {
    let page = page_size.max(1);
    let mut out = Vec::with_capacity(events.len());
    for ev in events {
        match ev {
            CacheEvent::Stored {
                hashes,
                mut parent,
                tokens,
                medium,
                cache_salt,
                lora_name,
            } if hashes.len() > 1 => {
                for (i, h) in hashes.iter().enumerate() {
                    let start = (i * page).min(tokens.len());
                    let end = ((i + 1) * page).min(tokens.len());
                    out.push(CacheEvent::Stored {
                        hashes: vec![*h],
                        parent,
                        tokens: tokens[start..end].to_vec(),
                        medium,
                        cache_salt: cache_salt.clone(),
                        lora_name: lora_name.clone(),
                    });
                    parent = Some(*h);
                }
            }
            CacheEvent::Removed { hashes, medium } if hashes.len() > 1 => {
                out.extend(hashes.into_iter().map(|h| CacheEvent::Removed {
                    hashes: vec![h],
                    medium,
                }));
            }
            other => out.push(other),
        }
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

    /// SGLang 0.5.9 (`_record_store_event`): a 3-page node is three `BlockStored`s chained
    /// page to page, the first keeping the node's parent; removals go one page each.
    #[test]
    fn per_page_splits_stores_and_removals_like_0_5_9() {
        let tokens: Vec<u32> = (0..12).collect();
        let out = per_page(
            vec![
                CacheEvent::stored(vec![1, 2, 3], Some(7), tokens),
                CacheEvent::stored(vec![4], Some(3), vec![12, 13, 14, 15]),
                CacheEvent::removed(vec![1, 2]),
                CacheEvent::Cleared,
            ],
            4,
        );
        assert_eq!(
            out,
            vec![
                CacheEvent::stored(vec![1], Some(7), vec![0, 1, 2, 3]),
                CacheEvent::stored(vec![2], Some(1), vec![4, 5, 6, 7]),
                CacheEvent::stored(vec![3], Some(2), vec![8, 9, 10, 11]),
                CacheEvent::stored(vec![4], Some(3), vec![12, 13, 14, 15]),
                CacheEvent::removed(vec![1]),
                CacheEvent::removed(vec![2]),
                CacheEvent::Cleared,
            ]
        );
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
