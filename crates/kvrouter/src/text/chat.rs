//! An OpenAI chat request turned into chat-template input the way SGLang's
//! `OpenAIServingChat._apply_jinja_template` (`entrypoints/openai/serving_chat.py`) does it:
//!
//! - `content: null` becomes `""`; keys whose value is null are dropped
//!   (`process_content_for_template_format`, `parser/jinja_template_utils.py`);
//! - list content: for a `"string"`-format template the `text`/`input_text` parts are joined
//!   with `" "`; for an `"openai"`-format template (one that loops over `message.content`, or
//!   mentions image/audio/video/vision) the parts are kept, media parts reduced to
//!   `{"type": "image"|"video"|"audio"}` (`detect_jinja_template_content_format`);
//! - `role: tool` text-part lists are joined with `" "` (`normalize_tool_content`);
//! - assistant `tool_calls[].function.arguments` JSON strings are parsed into objects
//!   (`normalize_assistant_tool_call_arguments`);
//! - a final assistant message with string content is removed and appended after the rendered
//!   prompt when `continue_final_message`, else turned into a user message
//!   (`_handle_last_assistant_message`);
//! - `tools` are passed unless `tool_choice` is `"none"`, only the named one for a named
//!   `tool_choice`, each shaped as SGLang's pydantic `Tool.model_dump()`;
//! - `reasoning_effort` and `chat_template_kwargs` become template variables.
//!
//! Values are read straight into minijinja values, so object keys keep the request's order.

use minijinja::value::{Value, ValueKind};
use serde::Deserialize;

use super::TextError;

/// How a template wants list content (SGLang's `jinja_template_content_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContentFormat {
    String,
    OpenAi,
}

impl ContentFormat {
    /// SGLang's detection: `openai` when the template mentions image/audio/video/vision or has a
    /// `for` loop over `message['content']` / `message.content` (or `msg`/`m`), else `string`.
    pub(crate) fn detect(template: &str) -> ContentFormat {
        if ["image", "audio", "video", "vision"]
            .iter()
            .any(|k| template.contains(k))
        {
            return ContentFormat::OpenAi;
        }
        let mut rest = template;
        while let Some(at) = rest.find("{%") {
            rest = &rest[at + 2..];
            let end = rest.find("%}").unwrap_or(rest.len());
            let stmt: String = rest[..end]
                .trim_start_matches(['-', '+'])
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            if let Some(after_for) = stmt.strip_prefix("for ") {
                if let Some((_, iter)) = after_for.split_once(" in ") {
                    let iter = iter.trim_start_matches('(');
                    for var in ["message", "msg", "m"] {
                        for access in [".content", "['content']", "[\"content\"]"] {
                            let target = format!("{var}{access}");
                            if let Some(tail) = iter.strip_prefix(&target) {
                                if !tail.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                                    return ContentFormat::OpenAi;
                                }
                            }
                        }
                    }
                }
            }
        }
        ContentFormat::String
    }
}

#[derive(Deserialize)]
struct Wire {
    messages: Value,
    #[serde(default)]
    tools: Option<Value>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    continue_final_message: Option<bool>,
    #[serde(default)]
    chat_template_kwargs: Option<Value>,
    #[serde(default)]
    reasoning_effort: Option<Value>,
}

/// What the template is rendered with, and what follows the rendered prompt.
#[derive(Debug)]
pub(crate) struct TemplateInput {
    pub messages: Value,
    pub tools: Option<Value>,
    pub kwargs: Vec<(String, Value)>,
    /// Content of a final assistant message continued (`continue_final_message`).
    pub assistant_prefix: Option<String>,
}

fn bad(message: impl Into<String>) -> TextError {
    TextError::Request(message.into())
}

fn get(v: &Value, key: &str) -> Option<Value> {
    v.get_attr(key).ok().filter(|x| !x.is_undefined())
}

fn is_none(v: &Value) -> bool {
    matches!(v.kind(), ValueKind::None | ValueKind::Undefined)
}

fn map_of(pairs: Vec<(String, Value)>) -> Value {
    Value::from_iter(pairs)
}

fn entries(v: &Value) -> Result<Vec<(String, Value)>, TextError> {
    let keys = v.try_iter().map_err(|e| bad(e.to_string()))?;
    let mut out = Vec::new();
    for k in keys {
        let item = v.get_item(&k).map_err(|e| bad(e.to_string()))?;
        out.push((
            k.as_str()
                .map(str::to_string)
                .unwrap_or_else(|| k.to_string()),
            item,
        ));
    }
    Ok(out)
}

fn list(v: &Value) -> Result<Vec<Value>, TextError> {
    Ok(v.try_iter().map_err(|e| bad(e.to_string()))?.collect())
}

/// Parses a chat request body into template input (see module docs).
pub(crate) fn template_input(body: &[u8], fmt: ContentFormat) -> Result<TemplateInput, TextError> {
    let wire: Wire = serde_json::from_slice(body).map_err(|e| bad(format!("chat request: {e}")))?;
    if wire.messages.kind() != ValueKind::Seq {
        return Err(bad("`messages` must be a list"));
    }
    let mut messages = Vec::new();
    for (i, m) in list(&wire.messages)?.into_iter().enumerate() {
        if m.kind() != ValueKind::Map {
            return Err(bad(format!("messages[{i}] must be an object")));
        }
        messages.push(message(&m, fmt)?);
    }
    let continue_final = wire.continue_final_message.unwrap_or(false);
    let mut assistant_prefix = None;
    if let Some(last) = messages.last_mut() {
        let is_assistant = last
            .iter()
            .any(|(k, v)| k == "role" && v.as_str() == Some("assistant"));
        let content = last
            .iter()
            .find(|(k, _)| k == "content")
            .and_then(|(_, v)| v.as_str().map(str::to_string));
        if let (true, Some(content)) = (is_assistant, content) {
            if continue_final {
                assistant_prefix = Some(content);
                messages.pop();
            } else {
                *last = vec![
                    ("role".to_string(), Value::from("user")),
                    ("content".to_string(), Value::from(content)),
                ];
            }
        }
    }
    let tools = match (&wire.tools, &wire.tool_choice) {
        (Some(t), _) if is_none(t) => None,
        (None, _) => None,
        (Some(_), Some(c)) if c.as_str() == Some("none") => None,
        (Some(t), choice) => {
            let named = choice
                .as_ref()
                .filter(|c| c.kind() == ValueKind::Map)
                .and_then(|c| get(c, "function"))
                .and_then(|f| get(&f, "name"))
                .and_then(|n| n.as_str().map(str::to_string));
            let mut out = Vec::new();
            for tool in list(t)? {
                let dumped = tool_model_dump(&tool)?;
                let name = get(&tool, "function")
                    .and_then(|f| get(&f, "name"))
                    .and_then(|n| n.as_str().map(str::to_string));
                if named.is_none() || named == name {
                    out.push(dumped);
                }
            }
            (!out.is_empty()).then(|| Value::from(out))
        }
    };
    let mut kwargs = Vec::new();
    let mut template_kwargs = match &wire.chat_template_kwargs {
        Some(k) if k.kind() == ValueKind::Map => entries(k)?,
        _ => Vec::new(),
    };
    // SGLang pops `reasoning_effort` out of chat_template_kwargs into the request field.
    let popped = template_kwargs
        .iter()
        .position(|(k, _)| k == "reasoning_effort")
        .map(|i| template_kwargs.remove(i).1);
    if let Some(effort) = popped.or(wire.reasoning_effort).filter(|v| !is_none(v)) {
        kwargs.push(("reasoning_effort".to_string(), effort));
    }
    kwargs.extend(template_kwargs);
    Ok(TemplateInput {
        messages: Value::from(messages.into_iter().map(map_of).collect::<Vec<_>>()),
        tools,
        kwargs,
        assistant_prefix,
    })
}

/// One message as SGLang hands it to the template (see module docs).
fn message(m: &Value, format: ContentFormat) -> Result<Vec<(String, Value)>, TextError> {
    let mut out = Vec::new();
    let role = get(m, "role").and_then(|r| r.as_str().map(str::to_string));
    let mut has_content = false;
    for (k, v) in entries(m)? {
        if k == "content" {
            has_content = true;
            out.push((k, content(&v, role.as_deref(), format)?));
        } else if is_none(&v) {
            continue;
        } else if k == "tool_calls" && role.as_deref() == Some("assistant") {
            out.push((k, tool_calls(&v)?));
        } else {
            out.push((k, v));
        }
    }
    if !has_content {
        out.push(("content".to_string(), Value::from("")));
    }
    Ok(out)
}

fn content(v: &Value, role: Option<&str>, format: ContentFormat) -> Result<Value, TextError> {
    if is_none(v) {
        return Ok(Value::from(""));
    }
    if v.kind() != ValueKind::Seq {
        return Ok(v.clone());
    }
    let parts = list(v)?;
    let part_type = |p: &Value| get(p, "type").and_then(|t| t.as_str().map(str::to_string));
    let text_of = |p: &Value| get(p, "text").map(|t| t.as_str().unwrap_or_default().to_string());
    let joined = |parts: &[Value]| {
        parts
            .iter()
            .filter(|p| matches!(part_type(p).as_deref(), Some("text" | "input_text")))
            .filter_map(text_of)
            .collect::<Vec<_>>()
            .join(" ")
    };
    match format {
        ContentFormat::String => Ok(Value::from(joined(&parts))),
        ContentFormat::OpenAi => {
            let mut out = Vec::new();
            for p in &parts {
                let kind = part_type(p);
                let simple = |t: &str| map_of(vec![("type".to_string(), Value::from(t))]);
                match kind.as_deref() {
                    Some("image_url" | "input_image") => out.push(simple("image")),
                    Some("video_url") => out.push(simple("video")),
                    Some("audio_url") => out.push(simple("audio")),
                    Some("text" | "input_text") => out.push(map_of(vec![
                        ("type".to_string(), Value::from("text")),
                        (
                            "text".to_string(),
                            text_of(p).map(Value::from).unwrap_or_default(),
                        ),
                    ])),
                    Some("tool_reference") => out.push(p.clone()),
                    _ => {}
                }
            }
            // `normalize_tool_content`: a tool message of text parts only becomes one string.
            let all_text = parts
                .iter()
                .all(|p| p.kind() == ValueKind::String || part_type(p).as_deref() == Some("text"));
            if role == Some("tool") && all_text {
                let texts: Vec<String> = parts
                    .iter()
                    .map(|p| match p.as_str() {
                        Some(s) => s.to_string(),
                        None => text_of(p).unwrap_or_default(),
                    })
                    .collect();
                return Ok(Value::from(texts.join(" ")));
            }
            Ok(Value::from(out))
        }
    }
}

/// Assistant `tool_calls` with `function.arguments` JSON strings parsed into objects.
fn tool_calls(v: &Value) -> Result<Value, TextError> {
    if v.kind() != ValueKind::Seq {
        return Ok(v.clone());
    }
    let mut out = Vec::new();
    for call in list(v)? {
        let Some(function) = get(&call, "function").filter(|f| f.kind() == ValueKind::Map) else {
            out.push(call);
            continue;
        };
        let mut f = entries(&function)?;
        for (k, arg) in f.iter_mut() {
            if k == "arguments" {
                if let Some(s) = arg.as_str() {
                    let parsed: Value = serde_json::from_str(s).map_err(|_| {
                        bad("Assistant tool call function.arguments must be valid JSON.")
                    })?;
                    if parsed.kind() != ValueKind::Map {
                        return Err(bad(
                            "Assistant tool call function.arguments must be a JSON object.",
                        ));
                    }
                    *arg = parsed;
                }
            }
        }
        let mut c = entries(&call)?;
        for (k, val) in c.iter_mut() {
            if k == "function" {
                *val = map_of(std::mem::take(&mut f));
            }
        }
        out.push(map_of(c));
    }
    Ok(Value::from(out))
}

/// SGLang's `Tool.model_dump()`: `{"type", "function": {"description", "name", "parameters", "strict"}}`.
fn tool_model_dump(tool: &Value) -> Result<Value, TextError> {
    let function = get(tool, "function")
        .filter(|f| f.kind() == ValueKind::Map)
        .ok_or_else(|| bad("each tool needs a `function` object"))?;
    let field = |k: &str| get(&function, k).unwrap_or(Value::from(()));
    let strict = get(&function, "strict")
        .filter(|s| !is_none(s))
        .unwrap_or(Value::from(false));
    let mut f = vec![
        ("description".to_string(), field("description")),
        ("name".to_string(), field("name")),
        ("parameters".to_string(), field("parameters")),
        ("strict".to_string(), strict),
    ];
    if let Some(d) = get(&function, "defer_loading").filter(|d| !is_none(d)) {
        f.push(("defer_loading".to_string(), d));
    }
    Ok(map_of(vec![
        (
            "type".to_string(),
            get(tool, "type").unwrap_or(Value::from("function")),
        ),
        ("function".to_string(), map_of(f)),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(body: &str, format: ContentFormat) -> TemplateInput {
        template_input(body.as_bytes(), format).unwrap()
    }

    #[test]
    fn detects_content_format_like_sglang() {
        assert_eq!(
            ContentFormat::detect("{% for m in messages %}{{ m.content }}{% endfor %}"),
            ContentFormat::String
        );
        assert_eq!(
            ContentFormat::detect("{%- for c in message['content'] -%}{{ c.text }}{%- endfor %}"),
            ContentFormat::OpenAi
        );
        assert_eq!(
            ContentFormat::detect("<|vision_start|>"),
            ContentFormat::OpenAi
        );
    }

    #[test]
    fn flattens_parts_drops_nulls_and_handles_the_last_assistant() {
        let t = input(
            r#"{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}],"name":null},
               {"role":"assistant","content":"partial"}]}"#,
            ContentFormat::String,
        );
        let m = list(&t.messages).unwrap();
        assert_eq!(m[0].get_attr("content").unwrap().as_str(), Some("a b"));
        assert!(m[0].get_attr("name").unwrap().is_undefined());
        // Not continued: the final assistant message becomes a user message.
        assert_eq!(m[1].get_attr("role").unwrap().as_str(), Some("user"));
        let t = input(
            r#"{"messages":[{"role":"user","content":null},{"role":"assistant","content":"partial"}],"continue_final_message":true}"#,
            ContentFormat::String,
        );
        assert_eq!(list(&t.messages).unwrap().len(), 1);
        assert_eq!(t.assistant_prefix.as_deref(), Some("partial"));
        assert_eq!(
            list(&t.messages).unwrap()[0]
                .get_attr("content")
                .unwrap()
                .as_str(),
            Some("")
        );
    }

    #[test]
    fn openai_format_keeps_parts_and_joins_tool_text() {
        let t = input(
            r#"{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]},
               {"role":"tool","content":[{"type":"text","text":"r1"},{"type":"text","text":"r2"}]}]}"#,
            ContentFormat::OpenAi,
        );
        let m = list(&t.messages).unwrap();
        let parts = list(&m[0].get_attr("content").unwrap()).unwrap();
        assert_eq!(parts[1].get_attr("type").unwrap().as_str(), Some("image"));
        assert_eq!(m[1].get_attr("content").unwrap().as_str(), Some("r1 r2"));
    }

    #[test]
    fn tools_follow_tool_choice_and_arguments_are_parsed() {
        let body = r#"{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},{"role":"user","content":"go"}],
            "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}},{"type":"function","function":{"name":"g"}}],
            "chat_template_kwargs":{"enable_thinking":false,"reasoning_effort":"high"}}"#;
        let t = input(body, ContentFormat::String);
        let tools = list(t.tools.as_ref().unwrap()).unwrap();
        assert_eq!(tools.len(), 2);
        assert_eq!(
            crate::text::pyjson::dumps(&tools[0], &Default::default()).unwrap(),
            r#"{"type": "function", "function": {"description": null, "name": "f", "parameters": {"type": "object"}, "strict": false}}"#
        );
        let m = list(&t.messages).unwrap();
        let args = m[0]
            .get_attr("tool_calls")
            .unwrap()
            .get_item(&Value::from(0))
            .unwrap();
        let args = args
            .get_attr("function")
            .unwrap()
            .get_attr("arguments")
            .unwrap();
        assert_eq!(args.get_attr("x").unwrap(), Value::from(1));
        assert_eq!(t.kwargs[0].0, "reasoning_effort");
        assert_eq!(t.kwargs[1].0, "enable_thinking");
        let none = body.replace("\"tools\"", "\"tool_choice\":\"none\",\"tools\"");
        assert!(input(&none, ContentFormat::String).tools.is_none());
        let named = body.replace(
            "\"tools\"",
            "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}},\"tools\"",
        );
        assert_eq!(
            list(input(&named, ContentFormat::String).tools.as_ref().unwrap())
                .unwrap()
                .len(),
            1
        );
        assert!(template_input(br#"{"messages":[{"role":"assistant","content":"","tool_calls":[{"function":{"arguments":"[1]"}}]}]}"#, ContentFormat::String).is_err());
    }
}
