//! The block namespace a request's pages will be stored under on an SGLang worker, read from
//! its `cache_salt`, `extra_key` and LoRA adapter (`lora_path`; on the OpenAI endpoints a
//! `model` of the form `base:adapter` first), so that routing hashes the request's pages as
//! the worker's events will name them (`tokens::namespace`).
//!
//! What SGLang 0.5.23 does with these fields (paths under `sglang/srt/`):
//! - `cache_salt` / `extra_key`: a string, or for a batch a list of strings, one per prompt;
//!   a list for a single prompt, a list of another length or a non-string item is a 400
//!   (`managers/io_struct.py:575-580`, `_normalize_extra_key` / `_normalize_cache_salt`
//!   `:850-884`). `""` counts as absent.
//! - `lora_path`: a string, or a list of strings / nulls, one per prompt
//!   (`entrypoints/openai/protocol.py:409`, `managers/io_struct.py:635-643`); it is the
//!   adapter's *name* (`lora/lora_registry.py:126-143` `acquire` looks names up), which the
//!   scheduler publishes as the store's `lora_name` (`managers/tokenizer_manager.py:1602-1603`
//!   sends `lora_name=obj.lora_path`; `mem_cache/events.py` `KvEventLoraNames.register`).
//! - OpenAI `model`: `base:adapter` selects the adapter and wins over `lora_path`
//!   (`entrypoints/openai/serving_base.py:40-78`: the served model name itself, or a name
//!   followed by `:`, is matched first, else the model splits at its first `:`; both halves
//!   are trimmed, an empty adapter is none).
//!
//! A single prompt's list `lora_path` counts by its first item (SGLang expands a single prompt
//! with `n > 1` into such a list). Batches are not hashed today; [`RoutingInput::namespace_key`]
//! answers per prompt all the same.

use kvrouter_index::{NamespaceParts, SeqHash};
use serde::Deserialize;

use super::{array_first_byte, Endpoint, InputError, RoutingInput};

/// One of `cache_salt` / `extra_key` / `lora_path`: absent, one value for every prompt, or
/// one per prompt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum PerPrompt {
    #[default]
    Absent,
    One(String),
    Each(Vec<Option<String>>),
}

impl PerPrompt {
    fn get(&self, prompt: usize) -> Option<&str> {
        match self {
            PerPrompt::Absent => None,
            PerPrompt::One(s) => Some(s.as_str()),
            PerPrompt::Each(v) => v.get(prompt).and_then(|s| s.as_deref()),
        }
        .filter(|s| !s.is_empty())
    }
}

/// The namespace fields of one request body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Namespace {
    cache_salt: PerPrompt,
    extra_key: PerPrompt,
    lora_path: PerPrompt,
    /// The OpenAI `model` string (chat / completions only).
    model: Option<String>,
}

/// The raw JSON of the namespace fields (`None` = absent or `null`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct RawNamespace<'a> {
    pub cache_salt: Option<&'a str>,
    pub extra_key: Option<&'a str>,
    pub lora_path: Option<&'a str>,
    pub model: Option<&'a str>,
}

fn bad(field: &'static str, message: impl Into<String>) -> InputError {
    InputError::BadField {
        field,
        message: message.into(),
    }
}

/// A `cache_salt` / `extra_key` value: a string, or a batch's list of strings.
fn keyed(
    field: &'static str,
    raw: Option<&str>,
    batch: Option<usize>,
) -> Result<PerPrompt, InputError> {
    let Some(raw) = raw else {
        return Ok(PerPrompt::Absent);
    };
    if raw.starts_with('"') {
        return serde_json::from_str::<String>(raw)
            .map(PerPrompt::One)
            .map_err(|e| bad(field, e.to_string()));
    }
    if array_first_byte(raw).is_none() {
        return Err(bad(
            field,
            "expected a string, or a list of strings for a batch",
        ));
    }
    let Some(prompts) = batch else {
        return Err(bad(field, "expected a string for a single request"));
    };
    let items = serde_json::from_str::<Vec<String>>(raw)
        .map_err(|_| bad(field, "every item of the list should be a string"))?;
    if items.len() != prompts {
        return Err(bad(
            field,
            format!(
                "the list has {} items for a batch of {prompts} prompts",
                items.len()
            ),
        ));
    }
    Ok(PerPrompt::Each(items.into_iter().map(Some).collect()))
}

/// A `lora_path` value: a string, or a list of strings and nulls.
fn lora(raw: Option<&str>) -> Result<PerPrompt, InputError> {
    const FIELD: &str = "lora_path";
    let Some(raw) = raw else {
        return Ok(PerPrompt::Absent);
    };
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Wire {
        One(String),
        Each(Vec<Option<String>>),
    }
    match serde_json::from_str::<Wire>(raw) {
        Ok(Wire::One(s)) => Ok(PerPrompt::One(s)),
        Ok(Wire::Each(v)) => Ok(PerPrompt::Each(v)),
        Err(_) => Err(bad(
            FIELD,
            "expected an adapter name (a string) or a list of adapter names and nulls",
        )),
    }
}

impl Namespace {
    /// Reads and checks the namespace fields; `batch` is the number of prompts of a batch
    /// request (`None` for a single prompt).
    pub(super) fn read(
        endpoint: Endpoint,
        raw: RawNamespace<'_>,
        batch: Option<usize>,
    ) -> Result<Namespace, InputError> {
        let model = match endpoint {
            Endpoint::Generate => None,
            // A non-string model is the worker's to refuse: it selects no adapter here.
            _ => raw
                .model
                .and_then(|m| serde_json::from_str::<String>(m).ok()),
        };
        Ok(Namespace {
            cache_salt: keyed("cache_salt", raw.cache_salt, batch)?,
            extra_key: keyed("extra_key", raw.extra_key, batch)?,
            lora_path: lora(raw.lora_path)?,
            model,
        })
    }

    /// The adapter of prompt `prompt`: the OpenAI model's, else `lora_path`'s.
    fn adapter<'s>(&'s self, prompt: usize, served_model_name: Option<&str>) -> Option<&'s str> {
        if let Some(adapter) = self
            .model
            .as_deref()
            .and_then(|m| adapter_of_model(m, served_model_name))
        {
            return Some(adapter);
        }
        self.lora_path.get(prompt)
    }
}

/// Only a model with a `:` can select an adapter (whatever the worker's served name).
fn may_name_adapter(model: &str) -> bool {
    model.contains(':')
}

/// The adapter a `base:adapter` model selects (`serving_base.py:40-60`
/// `_parse_model_parameter`); `served_model_name` is the worker's.
fn adapter_of_model<'m>(model: &'m str, served_model_name: Option<&str>) -> Option<&'m str> {
    if !may_name_adapter(model) || Some(model) == served_model_name {
        return None;
    }
    let adapter = match served_model_name
        .and_then(|served| model.strip_prefix(served))
        .and_then(|rest| rest.strip_prefix(':'))
    {
        Some(rest) => rest,
        None => model.split_once(':').map_or("", |(_, a)| a),
    };
    Some(adapter.trim()).filter(|a| !a.is_empty())
}

impl RoutingInput<'_> {
    /// True when the request's `model` may name an adapter (`base:adapter`), so its namespace
    /// depends on the worker's served model name; otherwise that name is never read.
    pub fn reads_served_model_name(&self) -> bool {
        self.namespace
            .model
            .as_deref()
            .is_some_and(may_name_adapter)
    }

    /// The namespace key (`tokens::namespace`) prompt `prompt` of this request is stored under
    /// on a worker serving its model as `served_model_name` (which decides how a
    /// `base:adapter` model splits); `None` = the default namespace.
    pub fn namespace_key(&self, prompt: usize, served_model_name: Option<&str>) -> Option<SeqHash> {
        let ns = &self.namespace;
        NamespaceParts {
            cache_salt: ns.cache_salt.get(prompt),
            lora: ns.adapter(prompt, served_model_name),
            extra_key: ns.extra_key.get(prompt),
            lora_id: None,
        }
        .key()
    }

    /// The LoRA adapter prompt `prompt` selects (see [`RoutingInput::namespace_key`]).
    pub fn lora_adapter(&self, prompt: usize, served_model_name: Option<&str>) -> Option<&str> {
        self.namespace.adapter(prompt, served_model_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(e: Endpoint, body: &str) -> Result<RoutingInput<'_>, InputError> {
        RoutingInput::parse(e, body.as_bytes())
    }

    fn key(salt: Option<&str>, lora: Option<&str>, extra: Option<&str>) -> Option<SeqHash> {
        NamespaceParts {
            cache_salt: salt,
            lora,
            extra_key: extra,
            lora_id: None,
        }
        .key()
    }

    fn field_of(e: InputError) -> &'static str {
        match e {
            InputError::BadField { field, .. } => field,
            other => panic!("not a field error: {other:?}"),
        }
    }

    #[test]
    fn a_plain_request_is_in_the_default_namespace() {
        let r = parse(Endpoint::Generate, r#"{"input_ids":[1,2]}"#).unwrap();
        assert_eq!(r.namespace_key(0, None), None);
        let r = parse(
            Endpoint::Generate,
            r#"{"input_ids":[1,2],"cache_salt":"","extra_key":null,"lora_path":""}"#,
        )
        .unwrap();
        assert_eq!(r.namespace_key(0, None), None);
    }

    #[test]
    fn salt_adapter_and_extra_key_make_the_key_the_events_make() {
        let r = parse(
            Endpoint::Generate,
            r#"{"input_ids":[1],"cache_salt":"tenant-\u0041","lora_path":"sql"}"#,
        )
        .unwrap();
        // The same parts as a store with cache_salt "tenant-A" and lora_name "sql".
        assert_eq!(
            r.namespace_key(0, None),
            key(Some("tenant-A"), Some("sql"), None)
        );
        let r = parse(Endpoint::Generate, r#"{"input_ids":[1],"extra_key":"x"}"#).unwrap();
        assert_eq!(r.namespace_key(0, None), key(None, None, Some("x")));
    }

    #[test]
    fn batches_carry_one_value_per_prompt() {
        let r = parse(
            Endpoint::Generate,
            r#"{"text":["a","b","c"],"lora_path":["x",null],"cache_salt":["s1","","s3"],"extra_key":"e"}"#,
        )
        .unwrap();
        assert_eq!(
            r.namespace_key(0, None),
            key(Some("s1"), Some("x"), Some("e"))
        );
        assert_eq!(r.namespace_key(1, None), key(None, None, Some("e")));
        assert_eq!(r.namespace_key(2, None), key(Some("s3"), None, Some("e")));
        // A single prompt's list lora_path counts by its first item.
        let r = parse(Endpoint::Generate, r#"{"input_ids":[1],"lora_path":["x"]}"#).unwrap();
        assert_eq!(r.lora_adapter(0, None), Some("x"));
    }

    #[test]
    fn wrong_types_are_a_400_naming_the_field() {
        for (body, field) in [
            (r#"{"input_ids":[1],"cache_salt":5}"#, "cache_salt"),
            (r#"{"input_ids":[1],"cache_salt":["a"]}"#, "cache_salt"),
            (r#"{"input_ids":[1],"extra_key":{"a":1}}"#, "extra_key"),
            (r#"{"input_ids":[1],"extra_key":true}"#, "extra_key"),
            (r#"{"text":["a","b"],"cache_salt":["a"]}"#, "cache_salt"),
            (r#"{"text":["a","b"],"extra_key":["a",null]}"#, "extra_key"),
            (r#"{"input_ids":[1],"lora_path":7}"#, "lora_path"),
            (r#"{"input_ids":[1],"lora_path":[1]}"#, "lora_path"),
        ] {
            let err = parse(Endpoint::Generate, body).unwrap_err();
            assert_eq!(field_of(err.clone()), field, "{body}");
            assert!(err.to_string().contains(field), "{err}");
        }
    }

    #[test]
    fn an_openai_model_selects_the_adapter_before_lora_path() {
        let chat = r#"{"model":"qwen3:sql","messages":[],"lora_path":"other"}"#;
        let r = parse(Endpoint::ChatCompletions, chat).unwrap();
        assert_eq!(r.lora_adapter(0, Some("qwen3")), Some("sql"));
        assert_eq!(
            r.namespace_key(0, Some("qwen3")),
            key(None, Some("sql"), None)
        );
        let r = parse(
            Endpoint::Completions,
            r#"{"model":"qwen3","prompt":[1],"lora_path":"other"}"#,
        )
        .unwrap();
        assert_eq!(r.lora_adapter(0, Some("qwen3")), Some("other"));
        // /generate has no model field.
        let r = parse(Endpoint::Generate, r#"{"model":"m:a","input_ids":[1]}"#).unwrap();
        assert_eq!(r.lora_adapter(0, None), None);
        // A non-string model selects nothing (the worker refuses it).
        let r = parse(Endpoint::Completions, r#"{"model":5,"prompt":"x"}"#).unwrap();
        assert_eq!(r.lora_adapter(0, None), None);
    }

    #[test]
    fn model_strings_split_as_sglang_splits_them() {
        let served = Some("s3://bucket/m");
        for (model, served, adapter) in [
            ("qwen3", Some("qwen3"), None),
            ("qwen3:sql", Some("qwen3"), Some("sql")),
            ("other:sql", Some("qwen3"), Some("sql")),
            ("qwen3: sql ", None, Some("sql")),
            ("qwen3:", None, None),
            ("qwen3: ", Some("qwen3"), None),
            ("s3://bucket/m", served, None),
            ("s3://bucket/m:sql", served, Some("sql")),
            ("s3://bucket/m:sql", None, Some("//bucket/m:sql")),
            ("a:b:c", None, Some("b:c")),
        ] {
            assert_eq!(
                adapter_of_model(model, served),
                adapter,
                "{model} / {served:?}"
            );
        }
    }

    #[test]
    fn the_served_model_name_is_read_only_for_a_model_that_can_name_an_adapter() {
        let plain = parse(Endpoint::Completions, r#"{"prompt":[1],"model":"qwen3"}"#).unwrap();
        assert!(!plain.reads_served_model_name());
        assert_eq!(
            plain.namespace_key(0, None),
            plain.namespace_key(0, Some("other"))
        );
        let adapter = parse(
            Endpoint::Completions,
            r#"{"prompt":[1],"model":"qwen3:sql"}"#,
        )
        .unwrap();
        assert!(adapter.reads_served_model_name());
        assert_ne!(adapter.namespace_key(0, None), None);
    }
}
