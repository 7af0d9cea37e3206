//! The real-tokenizer mode of `sglang-mock` (`--tokenizer-path DIR`): the model's
//! `tokenizer.json` (HF `tokenizers`) and its chat template (`tokenizer_config.json`'s
//! `chat_template` or `chat_template.jinja`, rendered with minijinja as HF renders it:
//! `trim_blocks`, `lstrip_blocks`, Python string methods, `raise_exception`, `tojson` as
//! Python's `json.dumps`), applied the way SGLang's `serving_chat._apply_jinja_template` does:
//! null content as `""`, text parts joined with `" "`, a final assistant message continued
//! (`continue_final_message`) or turned into a user message, `add_generation_prompt=True`,
//! `tools` unless `tool_choice` is `"none"`, `chat_template_kwargs` as variables, and the prompt
//! encoded without special tokens. Text prompts (`/generate` `text`, completions `prompt`) are
//! encoded with special tokens, as SGLang's tokenizer manager does.
//!
//! Independent of the router's implementation on purpose: the two must agree on the ids.

use std::path::Path;

use minijinja::{Environment, Error, ErrorKind};
use serde_json::{Map, Value};
use tokenizers::Tokenizer;

/// A loaded tokenizer and chat template.
pub struct Real {
    tokenizer: Tokenizer,
    env: Option<Environment<'static>>,
    specials: Vec<(String, String)>,
}

fn raise_exception(message: String) -> Result<String, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// Python `json.dumps(value, ensure_ascii=False)` (", " and ": " separators).
fn py_dumps(v: &Value, out: &mut String) {
    match v {
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_dumps(x, out);
            }
            out.push(']');
        }
        Value::Object(o) => {
            out.push('{');
            for (i, (k, x)) in o.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push_str(": ");
                py_dumps(x, out);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn tojson(value: minijinja::Value) -> Result<minijinja::Value, Error> {
    let v: Value = serde_json::to_value(&value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let mut out = String::new();
    py_dumps(&v, &mut out);
    Ok(minijinja::Value::from_safe_string(out))
}

impl Real {
    /// Loads `dir/tokenizer.json` (or `path` itself when it is a file) and the template.
    pub fn load(path: &Path) -> Result<Real, String> {
        let (dir, file) = if path.is_dir() {
            (path.to_path_buf(), path.join("tokenizer.json"))
        } else {
            (
                path.parent().map(Path::to_path_buf).unwrap_or_default(),
                path.to_path_buf(),
            )
        };
        let tokenizer =
            Tokenizer::from_file(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let config: Value = std::fs::read(dir.join("tokenizer_config.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(Value::Null);
        let template = std::fs::read_to_string(dir.join("chat_template.jinja"))
            .ok()
            .or_else(|| match config.get("chat_template") {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Array(a)) => a
                    .iter()
                    .find(|t| t["name"] == "default")
                    .or(a.first())
                    .and_then(|t| t["template"].as_str().map(str::to_string)),
                _ => None,
            });
        let specials = ["bos_token", "eos_token", "unk_token", "pad_token"]
            .iter()
            .filter_map(|k| {
                let v = config.get(*k)?;
                let s = v.as_str().or_else(|| v.get("content")?.as_str())?;
                Some((k.to_string(), s.to_string()))
            })
            .collect();
        let env = match template {
            Some(source) => {
                let mut env = Environment::new();
                env.set_trim_blocks(true);
                env.set_lstrip_blocks(true);
                env.set_unknown_method_callback(
                    minijinja_contrib::pycompat::unknown_method_callback,
                );
                env.add_function("raise_exception", raise_exception);
                env.add_filter("tojson", tojson);
                env.add_template_owned("chat", source)
                    .map_err(|e| format!("chat template: {e}"))?;
                Some(env)
            }
            None => None,
        };
        Ok(Real {
            tokenizer,
            env,
            specials,
        })
    }

    /// `tokenizer.encode(text)` (with special tokens).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        self.tokenizer
            .encode(text, true)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| e.to_string())
    }

    /// The text of `ids`, special tokens skipped.
    pub fn decode(&self, ids: &[u32]) -> String {
        self.tokenizer.decode(ids, true).unwrap_or_default()
    }

    /// The prompt ids of a chat request body (see module docs).
    pub fn chat_ids(&self, body: &[u8]) -> Result<Vec<u32>, String> {
        let env = self
            .env
            .as_ref()
            .ok_or("the tokenizer has no chat template")?;
        let req: Map<String, Value> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        let Some(Value::Array(raw)) = req.get("messages") else {
            return Err("messages must be a list.".into());
        };
        let mut messages: Vec<Map<String, Value>> = Vec::new();
        for m in raw {
            let Value::Object(m) = m else {
                return Err("each message must be an object.".into());
            };
            let mut out = Map::new();
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("content", Value::Null) => {
                        out.insert(k.clone(), Value::String(String::new()));
                    }
                    ("content", Value::Array(parts)) => {
                        let texts: Vec<&str> = parts
                            .iter()
                            .filter(|p| matches!(p["type"].as_str(), Some("text" | "input_text")))
                            .filter_map(|p| p["text"].as_str())
                            .collect();
                        out.insert(k.clone(), Value::String(texts.join(" ")));
                    }
                    (_, Value::Null) => {}
                    _ => {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            out.entry("content").or_insert(Value::String(String::new()));
            messages.push(out);
        }
        let mut suffix = String::new();
        if let Some(last) = messages.last() {
            if let (Some("assistant"), Some(Value::String(c))) = (
                last.get("role").and_then(Value::as_str),
                last.get("content"),
            ) {
                let c = c.clone();
                if req.get("continue_final_message") == Some(&Value::Bool(true)) {
                    suffix = c;
                    messages.pop();
                } else {
                    let mut user = Map::new();
                    user.insert("role".into(), "user".into());
                    user.insert("content".into(), Value::String(c));
                    *messages.last_mut().ok_or("no messages")? = user;
                }
            }
        }
        let tools = match (req.get("tools"), req.get("tool_choice")) {
            (_, Some(Value::String(c))) if c == "none" => Value::Null,
            (Some(t), _) => t.clone(),
            _ => Value::Null,
        };
        let mut ctx = Map::new();
        ctx.insert(
            "messages".into(),
            Value::from(messages.into_iter().map(Value::Object).collect::<Vec<_>>()),
        );
        ctx.insert("tools".into(), tools);
        ctx.insert("add_generation_prompt".into(), true.into());
        for (k, v) in &self.specials {
            ctx.insert(k.clone(), Value::String(v.clone()));
        }
        if let Some(Value::Object(kw)) = req.get("chat_template_kwargs") {
            for (k, v) in kw {
                ctx.insert(k.clone(), v.clone());
            }
        }
        let tmpl = env.get_template("chat").map_err(|e| e.to_string())?;
        let mut prompt = tmpl
            .render(minijinja::Value::from_serialize(&ctx))
            .map_err(|e| format!("chat template: {e}"))?;
        prompt.push_str(&suffix);
        self.tokenizer
            .encode(prompt.as_str(), false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| e.to_string())
    }
}
