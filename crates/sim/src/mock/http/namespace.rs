//! The cache namespace of each prompt of a generation call: `lora_path`, `extra_key` and
//! `cache_salt` as `GenerateReqInput` and the OpenAI request models carry them (one value
//! or one per batch item; empty strings count as absent, `managers/io_struct.py`
//! `_normalize_extra_key` / `_normalize_cache_salt`), the OpenAI `model` `base:adapter`
//! form taking precedence over `lora_path` (`OpenAIServingBase._resolve_lora_path`), and
//! the adapter resolved to its `lora_id` (`lora.rs`).

use serde::Deserialize;

use super::parse::OneOrMany;
use crate::mock::cache::Namespace;
use crate::mock::state::MockState;

#[derive(Deserialize, Default)]
#[serde(default)]
struct Fields {
    lora_path: Option<OneOrMany<Option<String>>>,
    extra_key: Option<OneOrMany<String>>,
    cache_salt: Option<OneOrMany<String>>,
    model: Option<String>,
}

fn per_item<T: Clone>(
    v: Option<OneOrMany<T>>,
    count: usize,
    name: &str,
) -> Result<Vec<Option<T>>, String> {
    match v {
        None => Ok(vec![None; count]),
        Some(OneOrMany::One(x)) => Ok(vec![Some(x); count]),
        Some(OneOrMany::Many(v)) if v.len() == count => Ok(v.into_iter().map(Some).collect()),
        Some(OneOrMany::Many(_)) => Err(format!(
            "The length of {name} should be equal to the batch size."
        )),
    }
}

/// `base:adapter` in an OpenAI `model` (`_parse_model_parameter`).
fn adapter_from_model(model: &str, served: &str) -> Option<String> {
    if !model.contains(':') || model == served {
        return None;
    }
    let adapter = match model.strip_prefix(&format!("{served}:")) {
        Some(a) => a,
        None => model.split_once(':').map_or("", |(_, a)| a),
    };
    let a = adapter.trim();
    (!a.is_empty()).then(|| a.to_string())
}

/// The namespaces of a call's `count` prompts. `openai` enables the `model` form.
pub fn for_call(
    state: &MockState,
    bytes: &[u8],
    count: usize,
    openai: bool,
) -> Result<Vec<Namespace>, String> {
    let f: Fields = serde_json::from_slice(bytes).unwrap_or_default();
    let from_model = f
        .model
        .as_deref()
        .filter(|_| openai)
        .and_then(|m| adapter_from_model(m, state.args.model_name()));
    let loras: Vec<Option<String>> = match from_model {
        Some(a) => vec![Some(a); count],
        None => per_item(f.lora_path, count, "lora_path")?
            .into_iter()
            .map(Option::flatten)
            .collect(),
    };
    let keys = per_item(f.extra_key, count, "extra_key")?;
    let salts = per_item(f.cache_salt, count, "cache_salt")?;
    let adapters = &state.adapters;
    let mut out = Vec::with_capacity(count);
    for ((lora, key), salt) in loras.into_iter().zip(keys).zip(salts) {
        let adapter = match lora.as_deref().filter(|l| !l.is_empty()) {
            Some(l) => Some(adapters.resolve(l)?),
            None => None,
        };
        out.push(Namespace::for_request(
            key.as_deref(),
            salt.as_deref(),
            adapter.map(|a| (a.name.as_str(), a.id.as_str())),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_adapter_syntax() {
        assert_eq!(adapter_from_model("m:a", "m").as_deref(), Some("a"));
        assert_eq!(adapter_from_model("m", "m"), None);
        assert_eq!(adapter_from_model("s3://x", "s3://x"), None);
        assert_eq!(
            adapter_from_model("s3://x:b", "s3://x").as_deref(),
            Some("b")
        );
        assert_eq!(adapter_from_model("o:", "m"), None);
    }
}
