//! The routing inputs of one request, read from the body bytes without building a DOM.
//!
//! Only the top-level keys the router needs are captured, as raw JSON slices borrowed from
//! the body; every other key is skipped. A fast scanner (`scan`) reads the common shape and
//! decodes a plain `input_ids` array while delimiting it (the bulk of a tokenised body);
//! any body it does not fully understand is read by serde_json instead (`fields`), so errors
//! are serde's. Texts and rids are decoded lazily, only when a policy asks for them. The body
//! itself is never re-serialised: the proxy forwards the original bytes.

pub(crate) mod approx;
mod fields;
mod ids;
mod namespace;
mod scan;
pub(crate) mod text;

use std::borrow::Cow;

use parking_lot::Mutex;
use serde::de::IgnoredAny;

/// The data-plane endpoint a request arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    Generate,
    ChatCompletions,
    Completions,
}

impl Endpoint {
    /// The worker path the request is forwarded to (the same as the router path).
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Generate => "/generate",
            Endpoint::ChatCompletions => "/v1/chat/completions",
            Endpoint::Completions => "/v1/completions",
        }
    }

    /// Short label for metrics.
    pub fn label(self) -> &'static str {
        match self {
            Endpoint::Generate => "generate",
            Endpoint::ChatCompletions => "chat_completions",
            Endpoint::Completions => "completions",
        }
    }
}

/// Why a body cannot be routed (all map to HTTP 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("request body is not valid JSON: {0}")]
    Malformed(String),
    #[error("request body has no prompt: expected one of {0}")]
    MissingPrompt(&'static str),
    #[error("field `{field}` is invalid: {message}")]
    BadField {
        field: &'static str,
        message: String,
    },
}

/// Routing inputs borrowed from a request body (see module docs).
#[derive(Debug, Clone)]
pub struct RoutingInput<'a> {
    pub endpoint: Endpoint,
    /// `"stream": true` in the body.
    pub stream: bool,
    /// Number of prompts (1 unless `text`/`input_ids`/`prompt` is a batch).
    pub batch_size: usize,
    input_ids: Option<&'a str>,
    /// `text` (generate) or `prompt` (completions) when it is text.
    text: Option<&'a str>,
    messages: Option<&'a str>,
    rid: Option<&'a str>,
    /// `input_ids` decoded while scanning, handed over by the first `token_ids()` call.
    decoded_ids: DecodedIds,
    /// Token ids of a text prompt, from the model's tokenizer (see `text`).
    text_ids: text::TextIds,
    /// `cache_salt`, `extra_key`, LoRA adapter: the block namespace (see `namespace`).
    namespace: namespace::Namespace,
}

/// Token ids decoded at parse time (a `Mutex` so `RoutingInput` stays `Sync`).
#[derive(Debug, Default)]
struct DecodedIds(Mutex<Option<Vec<u32>>>);

impl DecodedIds {
    fn take(&self) -> Option<Vec<u32>> {
        self.0.lock().take()
    }
}

impl Clone for DecodedIds {
    fn clone(&self) -> Self {
        DecodedIds(Mutex::new(self.0.lock().clone()))
    }
}

fn is_null(v: Option<&str>) -> Option<&str> {
    v.filter(|r| *r != "null")
}

/// First byte after an opening `[` (skipping whitespace), if `raw` is an array.
fn array_first_byte(raw: &str) -> Option<u8> {
    let s = raw.as_bytes();
    if s.first() != Some(&b'[') {
        return None;
    }
    s[1..].iter().copied().find(|b| !b.is_ascii_whitespace())
}

/// The number of prompts of a batch request (`None` for a single prompt), as
/// [`RoutingInput::is_batch`] decides.
fn batch_size_if_batch(
    batch_size: usize,
    input_ids: Option<&str>,
    text: Option<&str>,
) -> Option<usize> {
    let batch = batch_size != 1
        || input_ids.and_then(array_first_byte) == Some(b'[')
        || text.and_then(array_first_byte) == Some(b'"');
    batch.then_some(batch_size)
}

fn array_len(field: &'static str, raw: &str) -> Result<usize, InputError> {
    serde_json::from_str::<Vec<IgnoredAny>>(raw)
        .map(|v| v.len())
        .map_err(|e| InputError::BadField {
            field,
            message: e.to_string(),
        })
}

impl<'a> RoutingInput<'a> {
    /// Reads the routing inputs of `body` for `endpoint`. Fails on malformed JSON, a non-object
    /// body or a body with no prompt field. A plain `input_ids` array is decoded here, once.
    pub fn parse(endpoint: Endpoint, body: &'a [u8]) -> Result<Self, InputError> {
        // serde would also accept a JSON array as a struct (fields by position): only objects route.
        if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(InputError::Malformed(
                "expected a JSON object at the top level".into(),
            ));
        }
        let (wire, decoded) = match scan::scan(body) {
            Some(found) => found,
            None => (
                fields::read_with_serde(body).map_err(|e| InputError::Malformed(e.to_string()))?,
                None,
            ),
        };
        let input_ids = is_null(wire.input_ids);
        let text = match endpoint {
            Endpoint::Completions => is_null(wire.prompt),
            _ => is_null(wire.text),
        };
        let messages = is_null(wire.messages);
        let has_prompt = match endpoint {
            Endpoint::Generate => {
                input_ids.is_some() || text.is_some() || is_null(wire.input_embeds).is_some()
            }
            Endpoint::ChatCompletions => messages.is_some() || input_ids.is_some(),
            Endpoint::Completions => text.is_some() || input_ids.is_some(),
        };
        if !has_prompt {
            return Err(InputError::MissingPrompt(match endpoint {
                Endpoint::Generate => "`text`, `input_ids` or `input_embeds`",
                Endpoint::ChatCompletions => "`messages` or `input_ids`",
                Endpoint::Completions => "`prompt` or `input_ids`",
            }));
        }
        let batch_size = if let Some(ids) = input_ids.filter(|r| array_first_byte(r) == Some(b'['))
        {
            array_len("input_ids", ids)?
        } else if let Some(t) = text.filter(|r| {
            // A list of strings (or of token lists) is a batch; a list of numbers is one tokenised prompt.
            matches!(array_first_byte(r), Some(b'"') | Some(b'['))
        }) {
            array_len(
                if endpoint == Endpoint::Completions {
                    "prompt"
                } else {
                    "text"
                },
                t,
            )?
        } else {
            1
        };
        let batch = batch_size_if_batch(batch_size, input_ids, text);
        let namespace = namespace::Namespace::read(
            endpoint,
            namespace::RawNamespace {
                cache_salt: is_null(wire.cache_salt),
                extra_key: is_null(wire.extra_key),
                lora_path: is_null(wire.lora_path),
                model: is_null(wire.model),
            },
            batch,
        )?;
        Ok(RoutingInput {
            endpoint,
            stream: wire.stream.unwrap_or(false),
            batch_size,
            input_ids,
            text,
            messages,
            rid: is_null(wire.rid),
            decoded_ids: DecodedIds(Mutex::new(decoded.filter(|_| input_ids.is_some()))),
            text_ids: text::TextIds::default(),
            namespace,
        })
    }

    /// True when the request carries a batch of prompts.
    pub fn is_batch(&self) -> bool {
        batch_size_if_batch(self.batch_size, self.input_ids, self.text).is_some()
    }

    /// The token ids of a single (non-batch) prompt, decoded on demand: `input_ids` on any
    /// endpoint, or a tokenised completions `prompt`, else the ids of its text prompt when the
    /// model's tokenizer produced them ([`text`]). `None` when the request has no token ids
    /// or is a batch; `Some(Err)` when the field is not a list of u32. The first call hands over
    /// the ids decoded by `parse` (no copy); later calls decode again.
    pub fn token_ids(&self) -> Option<Result<Vec<u32>, InputError>> {
        let (field, raw) = match (self.input_ids, self.text) {
            (Some(ids), _) => ("input_ids", ids),
            (None, Some(t))
                if self.endpoint == Endpoint::Completions
                    && matches!(array_first_byte(t), Some(b'0'..=b'9') | Some(b']')) =>
            {
                ("prompt", t)
            }
            _ => return self.text_ids.get().map(Ok),
        };
        if array_first_byte(raw) == Some(b'[') {
            return None;
        }
        if field == "input_ids" {
            if let Some(ids) = self.decoded_ids.take() {
                return Some(Ok(ids));
            }
        }
        if let Some((ids, len)) = ids::decode_u32_array(raw.as_bytes()) {
            if len == raw.len() {
                return Some(Ok(ids));
            }
        }
        Some(
            serde_json::from_str::<Vec<u32>>(raw).map_err(|e| InputError::BadField {
                field,
                message: e.to_string(),
            }),
        )
    }

    /// True when [`RoutingInput::token_ids`] hands out the ids the model's tokenizer made from
    /// the text prompt ([`text`]) rather than ids the body carries.
    pub fn ids_from_tokenizer(&self) -> bool {
        self.input_ids.is_none() && self.text_ids.is_set()
    }

    /// Token ids of every prompt of a batch `input_ids` (`[[..],[..]]`), decoded on demand.
    pub fn batch_token_ids(&self) -> Option<Result<Vec<Vec<u32>>, InputError>> {
        let raw = self
            .input_ids
            .filter(|r| array_first_byte(r) == Some(b'['))?;
        Some(
            serde_json::from_str::<Vec<Vec<u32>>>(raw).map_err(|e| InputError::BadField {
                field: "input_ids",
                message: e.to_string(),
            }),
        )
    }

    /// The prompt text of a single text prompt (`text` / `prompt`), unescaped on demand.
    pub fn text(&self) -> Option<Cow<'a, str>> {
        let raw = self.text?;
        if !raw.starts_with('"') {
            return None;
        }
        serde_json::from_str::<Cow<'a, str>>(raw).ok()
    }

    /// The raw `messages` array of a chat request (for policies that hash it as text).
    pub fn messages_json(&self) -> Option<&'a str> {
        self.messages
    }

    /// Request ids from `rid` (a string or a list of strings), for `/abort_request`.
    pub fn rids(&self) -> Vec<String> {
        let Some(raw) = self.rid else {
            return Vec::new();
        };
        if let Ok(one) = serde_json::from_str::<String>(raw) {
            return vec![one];
        }
        serde_json::from_str::<Vec<Option<String>>>(raw)
            .map(|v| v.into_iter().flatten().collect())
            .unwrap_or_default()
    }
}

/// Test helper of the parsers' randomised equivalence tests: 1-3 random edits (replace with a
/// byte of `alphabet`, delete, insert), stopping early if the body empties.
#[cfg(test)]
fn mutate_bytes(rng: &mut impl rand::Rng, bytes: &mut Vec<u8>, alphabet: &[u8]) {
    for _ in 0..rng.random_range(1..4) {
        if bytes.is_empty() {
            return;
        }
        let i = rng.random_range(0..bytes.len());
        match rng.random_range(0..3) {
            0 => bytes[i] = alphabet[rng.random_range(0..alphabet.len())],
            1 => {
                bytes.remove(i);
            }
            _ => bytes.insert(i, alphabet[rng.random_range(0..alphabet.len())]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(e: Endpoint, s: &str) -> Result<RoutingInput<'_>, InputError> {
        RoutingInput::parse(e, s.as_bytes())
    }

    #[test]
    fn generate_input_ids_single_and_batch() {
        let r = parse(
            Endpoint::Generate,
            r#"{"input_ids":[1,2,3],"stream":true,"x":{"y":[1]}}"#,
        )
        .unwrap();
        assert!(r.stream);
        assert_eq!(r.batch_size, 1);
        assert_eq!(r.token_ids().unwrap().unwrap(), vec![1, 2, 3]);
        let r = parse(Endpoint::Generate, r#"{"input_ids":[ [1],[2,3] ]}"#).unwrap();
        assert_eq!(r.batch_size, 2);
        assert!(r.token_ids().is_none());
        assert_eq!(
            r.batch_token_ids().unwrap().unwrap(),
            vec![vec![1], vec![2, 3]]
        );
    }

    #[test]
    fn text_and_rid() {
        let r = parse(Endpoint::Generate, r#"{"text":"a\"b","rid":"r1"}"#).unwrap();
        assert_eq!(r.text().unwrap(), "a\"b");
        assert_eq!(r.rids(), vec!["r1"]);
        let r = parse(
            Endpoint::Generate,
            r#"{"text":["a","b","c"],"rid":["x","y","z"]}"#,
        )
        .unwrap();
        assert_eq!(r.batch_size, 3);
        assert!(r.is_batch());
        assert_eq!(r.rids().len(), 3);
    }

    #[test]
    fn chat_and_completions() {
        let r = parse(
            Endpoint::ChatCompletions,
            r#"{"messages":[{"role":"user","content":"hi"}]}"#,
        )
        .unwrap();
        assert!(r.messages_json().unwrap().starts_with('['));
        let r = parse(Endpoint::Completions, r#"{"prompt":[5,6]}"#).unwrap();
        assert_eq!(r.batch_size, 1);
        assert_eq!(r.token_ids().unwrap().unwrap(), vec![5, 6]);
        let r = parse(Endpoint::Completions, r#"{"prompt":["a","b"]}"#).unwrap();
        assert_eq!(r.batch_size, 2);
    }

    #[test]
    fn rejects_bad_bodies() {
        assert!(matches!(
            parse(Endpoint::Generate, "{"),
            Err(InputError::Malformed(_))
        ));
        assert!(matches!(
            parse(Endpoint::Generate, "[1]"),
            Err(InputError::Malformed(_))
        ));
        assert!(matches!(
            parse(Endpoint::Generate, r#"{"sampling_params":{}}"#),
            Err(InputError::MissingPrompt(_))
        ));
        assert!(matches!(
            parse(Endpoint::ChatCompletions, r#"{"text":"x"}"#),
            Err(InputError::MissingPrompt(_))
        ));
        assert!(matches!(
            parse(Endpoint::Generate, r#"{"text":null}"#),
            Err(InputError::MissingPrompt(_))
        ));
        let r = parse(Endpoint::Generate, r#"{"input_ids":["a"]}"#).unwrap();
        assert!(r.token_ids().unwrap().is_err());
    }
}
