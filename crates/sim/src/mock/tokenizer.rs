//! The tokenizer: a deterministic stand-in by default, or the model's real tokenizer and chat
//! template with `--tokenizer-path` (`real`, one per process, installed at start).
//!
//! Stand-in: text is split on Unicode whitespace; each word becomes one token: a word of the form
//! `t<N>` with `N < vocab` is token `N` (so generated text round-trips), any other word is
//! `256 + xxh3_64(word) % (vocab - 256)`. Ids below 256 are never produced from text.
//! Token `N` detokenizes to `" t<N>"`.
//!
//! Stand-in chat messages render as `<|im_start|> ROLE CONTENT <|im_end|>` per message followed
//! by `<|im_start|> assistant` and are then tokenized as text.

mod real;

use std::path::Path;
use std::sync::OnceLock;

use std::fmt::Write;

use serde_json::Value;
use xxhash_rust::xxh3::xxh3_64;

static REAL: OnceLock<real::Real> = OnceLock::new();

/// Switches this process to the real tokenizer at `path` (a model directory or a
/// `tokenizer.json`). Fails when it cannot be loaded or another one is installed.
pub fn install(path: &Path) -> Result<(), String> {
    let loaded = real::Real::load(path)?;
    REAL.set(loaded)
        .map_err(|_| "a tokenizer is already installed in this process".to_string())
}

/// Tokenizes `text` (the real tokenizer with special tokens, else the stand-in rule).
pub fn encode(text: &str, vocab: u32) -> Vec<u32> {
    if let Some(r) = REAL.get() {
        return r.encode(text).unwrap_or_default();
    }
    text.split_whitespace().map(|w| word_id(w, vocab)).collect()
}

/// The prompt ids of a chat request (`body`, whose `messages` are `messages`).
pub fn chat_ids(body: &[u8], messages: &[Value], vocab: u32) -> Result<Vec<u32>, String> {
    match REAL.get() {
        Some(r) => r.chat_ids(body),
        None => render_chat(messages).map(|t| encode(&t, vocab)),
    }
}

fn word_id(word: &str, vocab: u32) -> u32 {
    if let Some(n) = word.strip_prefix('t').and_then(|d| d.parse::<u32>().ok()) {
        if n < vocab && word.len() > 1 && !word[1..].starts_with('+') {
            return n;
        }
    }
    256 + (xxh3_64(word.as_bytes()) % u64::from(vocab - 256)) as u32
}

/// Appends the text of `ids` to `out`.
pub fn decode_into(ids: &[u32], out: &mut String) {
    if let Some(r) = REAL.get() {
        out.push_str(&r.decode(ids));
        return;
    }
    for id in ids {
        let _ = write!(out, " t{id}");
    }
}

/// Renders chat `messages` (OpenAI shape) with the stand-in template.
pub fn render_chat(messages: &[Value]) -> Result<String, String> {
    let mut out = String::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("messages[{i}].role must be a string"))?;
        out.push_str("<|im_start|> ");
        out.push_str(role);
        out.push(' ');
        match m.get("content") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => out.push_str(s),
            Some(Value::Array(parts)) => {
                for p in parts {
                    if let Some(t) = p.get("text").and_then(Value::as_str) {
                        out.push_str(t);
                        out.push(' ');
                    }
                }
            }
            Some(_) => return Err(format!("messages[{i}].content must be a string or a list")),
        }
        out.push_str(" <|im_end|> ");
    }
    out.push_str("<|im_start|> assistant");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_round_trips_generated_text() {
        assert_eq!(
            encode("hello world", 32000),
            encode(" hello  world ", 32000)
        );
        let mut s = String::new();
        decode_into(&[5, 31999, 700], &mut s);
        assert_eq!(encode(&s, 32000), vec![5, 31999, 700]);
        assert!(encode("hello", 32000)[0] >= 256);
    }

    #[test]
    fn chat_template_renders_roles() {
        let msgs: Vec<Value> =
            serde_json::from_str(r#"[{"role":"user","content":"hi there"}]"#).unwrap();
        let r = render_chat(&msgs).unwrap();
        assert_eq!(
            r,
            "<|im_start|> user hi there <|im_end|> <|im_start|> assistant"
        );
        assert!(
            render_chat(&serde_json::from_str::<Vec<Value>>(r#"[{"content":"x"}]"#).unwrap())
                .is_err()
        );
    }
}
