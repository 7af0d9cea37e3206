//! Small model directories built in memory for tests and benches (there is no hub here):
//! a WordLevel tokenizer whose word `t<N>` is token `N` (so synthetic ids round-trip through
//! text), a byte-level BPE tokenizer, and a ChatML chat template.

use std::path::Path;

use serde_json::{json, Value};

/// Qwen-style ChatML template (with tools rendered through `tojson`).
pub const CHATML: &str = "{%- if tools %}<|im_start|>system\n{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}<|im_end|>\n{%- endif %}\n{%- for message in messages %}\n{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}\n{%- endfor %}\n{%- if add_generation_prompt %}\n{{- '<|im_start|>assistant\n' }}\n{%- endif %}\n";

/// The special tokens of the fixtures, after the regular vocabulary.
pub const SPECIALS: [&str; 4] = ["<|im_start|>", "<|im_end|>", "<s>", "</s>"];

fn added_tokens(first_id: usize) -> Vec<Value> {
    SPECIALS
        .iter()
        .enumerate()
        .map(|(i, t)| {
            json!({"id": first_id + i, "content": t, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true})
        })
        .collect()
}

/// WordLevel over whitespace words: `t<N>` is `N` for `N < words`; then `system`, `user`,
/// `assistant`, `tool`, `<unk>`, then the special tokens.
pub fn wordlevel_json(words: usize) -> String {
    let mut vocab = serde_json::Map::new();
    for n in 0..words {
        vocab.insert(format!("t{n}"), json!(n));
    }
    let extra = ["system", "user", "assistant", "tool", "<unk>"];
    for (i, w) in extra.iter().enumerate() {
        vocab.insert(w.to_string(), json!(words + i));
    }
    let first_special = words + extra.len();
    for (i, t) in SPECIALS.iter().enumerate() {
        vocab.insert(t.to_string(), json!(first_special + i));
    }
    json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": added_tokens(first_special),
        "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}
    })
    .to_string()
}

/// GPT-2's byte-to-character map of byte-level BPE.
fn byte_chars() -> Vec<char> {
    let mut printable: Vec<u32> = (b'!' as u32..=b'~' as u32)
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut out = vec!['\0'; 256];
    for &b in &printable {
        out[b as usize] = char::from_u32(b).unwrap_or('?');
    }
    let mut n = 0;
    for b in 0..256u32 {
        if !printable.contains(&b) {
            out[b as usize] = char::from_u32(256 + n).unwrap_or('?');
            n += 1;
            printable.push(b);
        }
    }
    out
}

/// Byte-level BPE (GPT-2 pre-tokenizer regex) with merges that build every word of
/// `words` (and its space-prefixed form) letter by letter; special tokens after the vocab.
pub fn bpe_json(words: &[&str]) -> String {
    let chars = byte_chars();
    let mut vocab: Vec<String> = chars.iter().map(|c| c.to_string()).collect();
    let mut merges: Vec<String> = Vec::new();
    let space = chars[b' ' as usize];
    for w in words {
        for form in [w.to_string(), format!("{space}{w}")] {
            let mut cur = String::new();
            for (i, c) in form.chars().enumerate() {
                if i == 0 {
                    cur.push(c);
                    continue;
                }
                let merged = format!("{cur}{c}");
                if !vocab.contains(&merged) {
                    merges.push(format!("{cur} {c}"));
                    vocab.push(merged.clone());
                }
                cur = merged;
            }
        }
    }
    let map: serde_json::Map<String, Value> = vocab
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), json!(i)))
        .collect();
    json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": added_tokens(vocab.len()),
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "vocab": map, "merges": merges}
    })
    .to_string()
}

/// Common English words for [`bpe_json`].
pub const WORDS: [&str; 40] = [
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was", "on", "be",
    "at", "by", "this", "have", "from", "or", "one", "had", "not", "but", "what", "all", "were",
    "when", "we", "there", "can", "an", "your", "which", "their", "said", "if", "do", "will",
    "each",
];

/// Writes `tokenizer.json` and a `tokenizer_config.json` holding `template` into `dir`.
pub fn write_model_dir(dir: &Path, tokenizer_json: &str, template: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("tokenizer.json"), tokenizer_json)?;
    let config = json!({
        "bos_token": "<s>", "eos_token": "</s>", "chat_template": template,
    });
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string())
}
