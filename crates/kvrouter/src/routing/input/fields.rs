//! The top-level fields of a body that routing reads, as raw JSON slices borrowed from it,
//! and the reference reader for them: serde_json over the whole body.

use serde::Deserialize;
use serde_json::value::RawValue;

/// Raw JSON text of each routing field present in the body (`None` when absent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Fields<'a> {
    pub input_ids: Option<&'a str>,
    pub text: Option<&'a str>,
    pub prompt: Option<&'a str>,
    pub messages: Option<&'a str>,
    pub input_embeds: Option<&'a str>,
    pub stream: Option<bool>,
    pub rid: Option<&'a str>,
    pub cache_salt: Option<&'a str>,
    pub extra_key: Option<&'a str>,
    pub lora_path: Option<&'a str>,
    pub model: Option<&'a str>,
}

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(borrow, default)]
    input_ids: Option<&'a RawValue>,
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
    #[serde(borrow, default)]
    prompt: Option<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Option<&'a RawValue>,
    #[serde(borrow, default)]
    input_embeds: Option<&'a RawValue>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(borrow, default)]
    rid: Option<&'a RawValue>,
    #[serde(borrow, default)]
    cache_salt: Option<&'a RawValue>,
    #[serde(borrow, default)]
    extra_key: Option<&'a RawValue>,
    #[serde(borrow, default)]
    lora_path: Option<&'a RawValue>,
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
}

/// Reads the fields with serde_json (the behaviour the fast scanner must reproduce).
pub(super) fn read_with_serde(body: &[u8]) -> Result<Fields<'_>, serde_json::Error> {
    let w: Wire<'_> = serde_json::from_slice(body)?;
    Ok(Fields {
        input_ids: w.input_ids.map(RawValue::get),
        text: w.text.map(RawValue::get),
        prompt: w.prompt.map(RawValue::get),
        messages: w.messages.map(RawValue::get),
        input_embeds: w.input_embeds.map(RawValue::get),
        stream: w.stream,
        rid: w.rid.map(RawValue::get),
        cache_salt: w.cache_salt.map(RawValue::get),
        extra_key: w.extra_key.map(RawValue::get),
        lora_path: w.lora_path.map(RawValue::get),
        model: w.model.map(RawValue::get),
    })
}
