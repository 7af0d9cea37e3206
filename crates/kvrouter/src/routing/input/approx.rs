//! Approximate blocks of a text prompt no tokenizer could read (KV mode without
//! `--model-path` / `--tokenizer-path`, or a template that failed to render).
//!
//! The prompt's UTF-8 bytes (a `/generate` `text` or completions `prompt` string, or the raw
//! `messages` JSON of a chat request) are cut into pages of `page_size * BYTES_PER_TOKEN`
//! bytes, each hashed with its own seed and chained like token blocks from a fixed root. The
//! chain lives in its own namespace: the first page hangs off [`TEXT_ROOT`] (token chains start
//! from no parent) and pages are hashed with [`TEXT_SEED`], so a text block never matches a
//! token block a worker reported. No worker ever confirms these blocks: they exist only as the
//! router's own predictions (predict-on-route), so identical and prefix-sharing text prompts
//! keep their worker while they recur within `--predict-ttl-secs`, as sgl-router's approximate
//! character tree keeps them (docs/text-routing.md).

use std::borrow::Cow;

use kvrouter_index::{chain, SeqHash};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::{Endpoint, RoutingInput};

/// Bytes of text counted as one token (English text averages about four per BPE token).
pub(crate) const BYTES_PER_TOKEN: usize = 4;

/// Seed of the text page hashes (token pages use `tokens::XXH3_SEED`).
pub(crate) const TEXT_SEED: u64 = 0x6b76_7465_7874_0001;

/// Parent of the first text page: token chains have none, so text chains never meet them.
pub(crate) const TEXT_ROOT: SeqHash = 0x7465_7874_5f72_6f6f;

/// Chained hashes of the full pages of `text`, `page_size` tokens of [`BYTES_PER_TOKEN`] bytes
/// each (a trailing partial page is ignored, as for tokens).
pub(crate) fn text_blocks(text: &[u8], page_size: usize) -> Vec<SeqHash> {
    let page_bytes = page_size.max(1) * BYTES_PER_TOKEN;
    let mut parent = TEXT_ROOT;
    text.chunks_exact(page_bytes)
        .map(|page| {
            parent = chain(parent, xxh3_64_with_seed(page, TEXT_SEED));
            parent
        })
        .collect()
}

impl<'a> RoutingInput<'a> {
    /// The text an approximate route hashes: a single text prompt of a request that carries no
    /// token ids (`None` for token ids, batches and bodies without text).
    pub fn approx_text(&self) -> Option<Cow<'a, [u8]>> {
        if self.input_ids.is_some() || self.is_batch() {
            return None;
        }
        match self.endpoint {
            Endpoint::ChatCompletions => self.messages.map(|m| Cow::Borrowed(m.as_bytes())),
            Endpoint::Generate | Endpoint::Completions => self.text().map(|t| match t {
                Cow::Borrowed(s) => Cow::Borrowed(s.as_bytes()),
                Cow::Owned(s) => Cow::Owned(s.into_bytes()),
            }),
        }
    }

    /// [`text_blocks`] of [`RoutingInput::approx_text`], if the request has such a text.
    pub fn approx_text_blocks(&self, page_size: usize) -> Option<Vec<SeqHash>> {
        self.approx_text().map(|t| text_blocks(&t, page_size))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use kvrouter_index::seq_hashes;

    fn blocks(e: Endpoint, body: &str) -> Option<Vec<SeqHash>> {
        RoutingInput::parse(e, body.as_bytes())
            .unwrap()
            .approx_text_blocks(4)
    }

    #[test]
    fn pages_chain_so_a_shared_prefix_shares_its_blocks() {
        let a = text_blocks(&[b'x'; 64], 4);
        assert_eq!(a.len(), 4, "16-byte pages");
        let mut longer = vec![b'x'; 48];
        longer.extend_from_slice(&[b'y'; 40]);
        let b = text_blocks(&longer, 4);
        assert_eq!(b.len(), 5);
        assert_eq!(a[..3], b[..3]);
        assert_ne!(a[3], b[3]);
        // Same bytes at another position hash differently (the chain).
        assert_ne!(a[0], a[1]);
        assert!(text_blocks(&[b'x'; 15], 4).is_empty());
    }

    #[test]
    fn text_blocks_never_equal_the_token_blocks_of_the_same_bytes() {
        let bytes: Vec<u8> = (0..64u8).collect();
        let as_tokens: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let text = text_blocks(&bytes, 4);
        let tokens = seq_hashes(&as_tokens, 1);
        assert!(text.iter().all(|h| !tokens.contains(h)));
    }

    #[test]
    fn only_single_text_prompts_without_ids_are_approximated() {
        let long = "a".repeat(40);
        let chat = format!(r#"{{"messages":[{{"role":"user","content":"{long}"}}]}}"#);
        assert_eq!(blocks(Endpoint::ChatCompletions, &chat).unwrap().len(), 4);
        let generate = format!(r#"{{"text":"{long}"}}"#);
        assert_eq!(blocks(Endpoint::Generate, &generate).unwrap().len(), 2);
        let completions = format!(r#"{{"prompt":"{long}"}}"#);
        assert_eq!(
            blocks(Endpoint::Completions, &completions),
            blocks(Endpoint::Generate, &generate)
        );
        // Escapes are decoded first: the text, not its JSON spelling, is hashed.
        assert_eq!(
            blocks(
                Endpoint::Generate,
                &format!(r#"{{"text":"\u0061{}"}}"#, &long[1..])
            ),
            blocks(Endpoint::Generate, &generate)
        );
        assert!(blocks(Endpoint::Generate, r#"{"input_ids":[1,2,3]}"#).is_none());
        assert!(blocks(Endpoint::Generate, r#"{"text":["a","b"]}"#).is_none());
        assert!(blocks(Endpoint::Completions, r#"{"prompt":[1,2]}"#).is_none());
        assert!(blocks(
            Endpoint::ChatCompletions,
            r#"{"messages":[],"input_ids":[1]}"#
        )
        .is_none());
    }
}
