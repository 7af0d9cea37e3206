//! The request as the KV decision sees it: its token ids hashed into chained block hashes in
//! the namespace the worker stores them in, or approximate text pages when no tokenizer could
//! read it, or nothing (then it is routed by load alone). Reads only; the metrics of what was
//! hashed are counted when the decision is booked.

use super::metrics::InputSource;
use crate::routing::input::RoutingInput;
use crate::workers::Worker;
use kvrouter_index::{seq_hashes_in, SeqHash};
use std::sync::Arc;

/// One request's blocks (see module docs).
pub(super) struct Prompt {
    /// Token ids (empty for approximate text and for no input).
    pub tokens: Vec<u32>,
    /// Chained block hashes, one per full page.
    pub seqs: Vec<SeqHash>,
    pub source: InputSource,
    /// Why there is nothing to hash (`kvrouter_kv_no_tokens_total`'s label), if so.
    pub no_tokens: Option<&'static str>,
}

impl Prompt {
    /// Hashes `input` at `page` tokens per block.
    pub(super) fn read(
        input: &RoutingInput<'_>,
        candidates: &[Arc<Worker>],
        page: usize,
    ) -> Prompt {
        let ids = input.token_ids();
        if let Some(Ok(tokens)) = ids {
            // In the namespace the worker stores them in (`input/namespace.rs`); the fleet is
            // scanned for a served model name only when the request's model can name an adapter.
            let served = input
                .reads_served_model_name()
                .then(|| {
                    candidates
                        .iter()
                        .find_map(|w| w.info.served_model_name.as_deref())
                })
                .flatten();
            let seqs = seq_hashes_in(input.namespace_key(0, served), &tokens, page);
            let source = if input.ids_from_tokenizer() {
                InputSource::Tokenizer
            } else {
                InputSource::Tokens
            };
            return Prompt {
                tokens,
                seqs,
                source,
                no_tokens: None,
            };
        }
        if ids.is_none() {
            // No tokenizer: the text's own pages, in their namespace (`input/approx.rs`).
            if let Some(seqs) = input.approx_text_blocks(page).filter(|s| !s.is_empty()) {
                return Prompt {
                    tokens: Vec::new(),
                    seqs,
                    source: InputSource::TextApprox,
                    no_tokens: None,
                };
            }
        }
        let reason = match ids {
            Some(Err(_)) => "invalid_token_ids",
            _ if input.is_batch() => "batch",
            _ => "no_token_ids",
        };
        Prompt {
            tokens: Vec::new(),
            seqs: Vec::new(),
            source: InputSource::None,
            no_tokens: Some(reason),
        }
    }

    /// Identical prompts (siblings) share a prefill and their KV: the key that tells their
    /// load apart (the last block hash; None without a full page).
    pub(super) fn key(&self) -> Option<u64> {
        self.seqs.last().copied()
    }

    /// Pages of the prompt SGLang can match: the prompt minus its last token, in whole pages.
    pub(super) fn matchable_tokens(&self, page: usize) -> u64 {
        (self.tokens.len().saturating_sub(1) / page * page) as u64
    }
}
