//! `TextTokenizer`: a model's `tokenizer.json` and chat template, loaded from a local model
//! directory (or a `tokenizer.json` path), turning text requests into the ids SGLang prefills.
//!
//! - `/generate` `text` and `/v1/completions` `prompt`: `encode(text)` with special tokens, as
//!   SGLang's `TokenizerManager` calls `tokenizer.encode(text)`;
//! - chat: the template rendered (`chat`, `template`), the continued assistant prefix appended,
//!   then `encode(prompt, add_special_tokens=False)` (SGLang's `_apply_jinja_template`), through
//!   the per-session prefix cache (`prefix_cache`).
//!
//! Caching relies on one property of HF tokenizers: added special tokens are split out of the
//! text before normalisation and pre-tokenisation, so the ids of `A + T + B` (T a special token)
//! are `ids(A + T) ++ ids(B)`. Only special tokens that the chat template writes are used as
//! cut points; the property is checked on probes at load and the cache is disabled for a
//! tokenizer that breaks it (e.g. a pre-tokenizer that treats the first split specially).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value as Json;
use tokenizers::Tokenizer;
use xxhash_rust::xxh3::Xxh3;

use super::chat::{template_input, ContentFormat};
use super::prefix_cache::PrefixCache;
use super::template::ChatTemplate;
use super::TextError;

/// Text that must round-trip through cut points (see module docs).
const PROBES: [&str; 4] = ["x y", " z\nw", "\n\nq", "assistant\n"];

/// A loaded tokenizer plus chat template (see module docs).
pub struct TextTokenizer {
    tokenizer: Tokenizer,
    template: Option<ChatTemplate>,
    format: ContentFormat,
    /// Special tokens after which a prompt may be cut (empty: cache disabled).
    boundaries: Vec<String>,
    cache: Mutex<PrefixCache>,
    path: PathBuf,
    /// Chat prompt bytes actually tokenized (the rest came from the cache).
    encoded_bytes: AtomicU64,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("path", &self.path)
            .field("boundaries", &self.boundaries)
            .finish()
    }
}

fn read_json(path: &Path) -> Result<Option<Json>, TextError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| TextError::Load(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(TextError::Load(format!("{}: {e}", path.display()))),
    }
}

/// A special-token entry of `tokenizer_config.json`: a string or `{"content": ...}`.
fn token_text(v: &Json) -> Option<String> {
    match v {
        Json::String(s) => Some(s.clone()),
        Json::Object(o) => o.get("content").and_then(Json::as_str).map(str::to_string),
        _ => None,
    }
}

/// The chat template of `config` (a string, or the `default` of a named list), or the
/// `chat_template.jinja` file beside it, which newer transformers write and prefer.
fn chat_template_source(dir: &Path, config: Option<&Json>) -> Result<Option<String>, TextError> {
    match std::fs::read_to_string(dir.join("chat_template.jinja")) {
        Ok(s) => return Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(TextError::Load(format!("chat_template.jinja: {e}"))),
    }
    Ok(match config.and_then(|c| c.get("chat_template")) {
        Some(Json::String(s)) => Some(s.clone()),
        Some(Json::Array(named)) => named
            .iter()
            .find(|t| t.get("name").and_then(Json::as_str) == Some("default"))
            .or_else(|| named.first())
            .and_then(|t| t.get("template"))
            .and_then(Json::as_str)
            .map(str::to_string),
        _ => None,
    })
}

impl TextTokenizer {
    /// Loads from a model directory (`tokenizer.json`, `tokenizer_config.json`,
    /// `chat_template.jinja`) or a `tokenizer.json` path; reads local files only.
    /// `cache_bytes` bounds the per-session cache (0 disables it).
    pub fn load(path: &Path, cache_bytes: usize) -> Result<TextTokenizer, TextError> {
        let (dir, file) = if path.is_dir() {
            (path.to_path_buf(), path.join("tokenizer.json"))
        } else {
            let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
            (dir, path.to_path_buf())
        };
        if !file.is_file() {
            return Err(TextError::Load(format!("{} not found", file.display())));
        }
        let tokenizer = Tokenizer::from_file(&file)
            .map_err(|e| TextError::Load(format!("{}: {e}", file.display())))?;
        let config = read_json(&dir.join("tokenizer_config.json"))?;
        let special_tokens: Vec<(String, String)> = [
            "bos_token",
            "eos_token",
            "unk_token",
            "pad_token",
            "sep_token",
            "cls_token",
            "mask_token",
        ]
        .iter()
        .filter_map(|k| {
            let v = config.as_ref()?.get(*k)?;
            Some((k.to_string(), token_text(v)?))
        })
        .collect();
        let template = chat_template_source(&dir, config.as_ref())?
            .map(|s| ChatTemplate::new(s, special_tokens))
            .transpose()?;
        Ok(TextTokenizer::build(tokenizer, template, cache_bytes, path))
    }

    /// A tokenizer from parts (tests, benches).
    pub fn from_parts(
        tokenizer: Tokenizer,
        template: Option<ChatTemplate>,
        cache_bytes: usize,
    ) -> TextTokenizer {
        TextTokenizer::build(tokenizer, template, cache_bytes, Path::new("<memory>"))
    }

    fn build(
        tokenizer: Tokenizer,
        template: Option<ChatTemplate>,
        cache_bytes: usize,
        path: &Path,
    ) -> TextTokenizer {
        let format = template
            .as_ref()
            .map_or(ContentFormat::String, |t| ContentFormat::detect(t.source()));
        let mut t = TextTokenizer {
            tokenizer,
            template,
            format,
            boundaries: Vec::new(),
            cache: Mutex::new(PrefixCache::new(cache_bytes)),
            path: path.to_path_buf(),
            encoded_bytes: AtomicU64::new(0),
        };
        if cache_bytes > 0 {
            t.boundaries = t.safe_boundaries();
        }
        t
    }

    /// Special added tokens the template writes and that split prompts exactly (probed).
    fn safe_boundaries(&self) -> Vec<String> {
        let Some(template) = &self.template else {
            return Vec::new();
        };
        let mut tokens: Vec<String> = self
            .tokenizer
            .get_added_tokens_decoder()
            .into_values()
            .filter(|t| t.special && !t.rstrip && !t.normalized && !t.content.is_empty())
            .filter(|t| template.source().contains(&t.content))
            .map(|t| t.content)
            .collect();
        tokens.sort();
        tokens.dedup();
        let exact = tokens.iter().all(|t| {
            PROBES.iter().all(|a| {
                PROBES.iter().all(|b| {
                    let head = format!("{a}{t}");
                    let whole = format!("{head}{b}");
                    match (self.ids(&whole), self.ids(&head), self.ids(b)) {
                        (Ok(w), Ok(mut h), Ok(tail)) => {
                            h.extend(tail);
                            w == h
                        }
                        _ => false,
                    }
                })
            })
        });
        if exact {
            tokens
        } else {
            tracing::info!(
                "tokenizer does not split exactly at special tokens: per-session cache disabled"
            );
            Vec::new()
        }
    }

    /// Where it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a chat template was found (chat requests need one).
    pub fn has_chat_template(&self) -> bool {
        self.template.is_some()
    }

    /// Whether the per-session cache is in use.
    pub fn caches(&self) -> bool {
        !self.boundaries.is_empty()
    }

    /// Empties the per-session cache (benches).
    pub fn clear_cache(&self) {
        let mut cache = self.cache.lock();
        *cache = PrefixCache::new(cache.max_bytes());
    }

    /// Bytes held by the per-session cache.
    pub fn cache_bytes(&self) -> usize {
        self.cache.lock().bytes()
    }

    /// Chat prompt bytes tokenized so far (not served from the per-session cache).
    pub fn encoded_bytes(&self) -> u64 {
        self.encoded_bytes.load(Ordering::Relaxed)
    }

    fn ids(&self, text: &str) -> Result<Vec<u32>, TextError> {
        self.encoded_bytes
            .fetch_add(text.len() as u64, Ordering::Relaxed);
        self.tokenizer
            .encode_fast(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TextError::Tokenize(e.to_string()))
    }

    /// `/generate` `text`, `/v1/completions` `prompt`: encoded with special tokens.
    pub fn encode_text(&self, text: &str) -> Result<Vec<u32>, TextError> {
        self.tokenizer
            .encode_fast(text, true)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TextError::Tokenize(e.to_string()))
    }

    /// The prompt SGLang builds for a chat request body: rendered template plus the
    /// continued assistant prefix.
    pub fn render_chat(&self, body: &[u8]) -> Result<String, TextError> {
        let template = self.template.as_ref().ok_or(TextError::NoChatTemplate)?;
        let input = template_input(body, self.format)?;
        let mut prompt = template.render(input.messages, input.tools, input.kwargs)?;
        if let Some(prefix) = input.assistant_prefix {
            prompt.push_str(&prefix);
        }
        Ok(prompt)
    }

    /// The token ids of a chat request body, through the per-session cache.
    pub fn encode_chat(&self, body: &[u8]) -> Result<Vec<u32>, TextError> {
        let prompt = self.render_chat(body)?;
        self.encode_prompt(&prompt)
    }

    /// The token ids of a chat request body, tokenizing the whole prompt (the reference the
    /// cached path must equal).
    pub fn encode_chat_uncached(&self, body: &[u8]) -> Result<Vec<u32>, TextError> {
        let prompt = self.render_chat(body)?;
        self.ids(&prompt)
    }

    /// Byte offsets just after each boundary token in `prompt`, ascending.
    fn cuts(&self, prompt: &str) -> Vec<usize> {
        let mut cuts: Vec<usize> = self
            .boundaries
            .iter()
            .flat_map(|t| {
                memchr::memmem::find_iter(prompt.as_bytes(), t.as_bytes())
                    .map(move |at| at + t.len())
            })
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        cuts
    }

    /// A rendered chat prompt's ids: the longest cached prefix ending at a cut, then the rest
    /// tokenized cut by cut so that every cut's token count is known for the next turn.
    pub fn encode_prompt(&self, prompt: &str) -> Result<Vec<u32>, TextError> {
        if self.boundaries.is_empty() {
            return self.ids(prompt);
        }
        let cuts = self.cuts(prompt);
        let mut hasher = Xxh3::new();
        let mut keys = Vec::with_capacity(cuts.len());
        let mut from = 0;
        for &cut in &cuts {
            hasher.update(&prompt.as_bytes()[from..cut]);
            keys.push(hasher.digest128());
            from = cut;
        }
        let hit = {
            let mut cache = self.cache.lock();
            keys.iter()
                .enumerate()
                .rev()
                .find_map(|(i, k)| cache.get(*k).map(|(tokens, n)| (i, tokens, n)))
        };
        let (first, mut ids, mut from) = match hit {
            Some((i, tokens, n)) => (i + 1, tokens[..n].to_vec(), cuts[i]),
            None => (0, Vec::with_capacity(prompt.len() / 3), 0),
        };
        let mut boundaries = Vec::with_capacity(cuts.len());
        if let Some(i) = first.checked_sub(1) {
            // The earlier cuts' counts come from the entry hit (so it is superseded).
            let cache = self.cache.lock();
            boundaries.extend(
                keys[..i]
                    .iter()
                    .filter_map(|k| cache.count(*k).map(|n| (*k, n))),
            );
            boundaries.push((keys[i], ids.len() as u32));
        }
        for i in first..cuts.len() {
            ids.extend(self.ids(&prompt[from..cuts[i]])?);
            boundaries.push((keys[i], ids.len() as u32));
            from = cuts[i];
        }
        ids.extend(self.ids(&prompt[from..])?);
        self.cache
            .lock()
            .insert(Arc::from(ids.as_slice()), boundaries);
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::fixture;
    use rand::{Rng, SeedableRng};
    use serde_json::json;

    fn tokenizer(json: &str, cache_bytes: usize) -> TextTokenizer {
        let dir = tempfile::tempdir().unwrap();
        fixture::write_model_dir(dir.path(), json, fixture::CHATML).unwrap();
        TextTokenizer::load(dir.path(), cache_bytes).unwrap()
    }

    fn body(messages: &[serde_json::Value]) -> Vec<u8> {
        serde_json::to_vec(&json!({"model": "m", "messages": messages})).unwrap()
    }

    fn text(rng: &mut impl Rng, words: usize) -> String {
        let pool = [
            "the",
            "of",
            "was",
            "t12",
            "t7",
            "zebra",
            "\n",
            "  ",
            "<|im_end|>",
            "é",
            "42",
            ".",
            ",",
        ];
        (0..words)
            .map(|_| pool[rng.random_range(0..pool.len())])
            .collect::<Vec<_>>()
            .join(if rng.random_bool(0.5) { " " } else { "" })
    }

    /// The cached path equals whole-prompt tokenization over random agent conversations
    /// (several interleaved sessions, branching siblings, a tight cache), and later turns
    /// tokenize only their new part.
    #[test]
    fn cached_path_equals_full_tokenization() {
        for json in [
            fixture::bpe_json(&fixture::WORDS),
            fixture::wordlevel_json(100),
        ] {
            let t = tokenizer(&json, 1 << 20);
            assert!(t.caches(), "probes pass for the fixtures");
            let mut rng = rand::rngs::StdRng::seed_from_u64(7);
            let mut sessions: Vec<Vec<serde_json::Value>> = (0..4)
                .map(|_| {
                    vec![json!({"role": "system", "content": "shared system prompt of the agent"})]
                })
                .collect();
            for _ in 0..60 {
                let s = rng.random_range(0..sessions.len());
                let n = rng.random_range(1..30);
                let user = text(&mut rng, n);
                sessions[s].push(json!({"role": "user", "content": user}));
                let b = body(&sessions[s]);
                assert_eq!(
                    t.encode_chat(&b).unwrap(),
                    t.encode_chat_uncached(&b).unwrap()
                );
                let reply = text(&mut rng, n);
                sessions[s].push(json!({"role": "assistant", "content": reply}));
                if rng.random_bool(0.1) {
                    let fork = sessions[s].clone();
                    sessions.push(fork);
                }
            }
        }
    }

    #[test]
    fn the_next_turn_tokenizes_only_its_new_messages() {
        let t = tokenizer(&fixture::bpe_json(&fixture::WORDS), 1 << 20);
        let long = "the of and to in ".repeat(400);
        let mut msgs = vec![json!({"role": "user", "content": long})];
        t.encode_chat(&body(&msgs)).unwrap();
        let before = t.encoded_bytes();
        msgs.push(json!({"role": "assistant", "content": "short reply"}));
        msgs.push(json!({"role": "user", "content": "next"}));
        let ids = t.encode_chat(&body(&msgs)).unwrap();
        let new_bytes = t.encoded_bytes() - before;
        assert!(new_bytes < 100, "tokenized {new_bytes} bytes again");
        assert_eq!(ids, t.encode_chat_uncached(&body(&msgs)).unwrap());
        // One entry per conversation: the previous turn was superseded.
        assert_eq!(t.cache.lock().len(), 1);
    }

    #[test]
    fn without_cache_and_for_plain_text() {
        let t = tokenizer(&fixture::wordlevel_json(100), 0);
        assert!(!t.caches());
        let b = body(&[json!({"role": "user", "content": "t1 t2"})]);
        let ids = t.encode_chat(&b).unwrap();
        // <|im_start|> user t1 t2 <|im_end|> <|im_start|> assistant
        assert_eq!(ids, vec![105, 101, 1, 2, 106, 105, 102]);
        assert_eq!(t.encode_text("t5 t6").unwrap(), vec![5, 6]);
        assert!(matches!(
            t.encode_chat(br#"{"messages":{}}"#),
            Err(TextError::Request(_))
        ));
    }

    #[test]
    fn loads_only_local_files() {
        assert!(matches!(
            TextTokenizer::load(Path::new("Qwen/Qwen3-8B"), 0),
            Err(TextError::Load(_))
        ));
    }
}
