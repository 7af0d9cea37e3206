//! Reads what loadgen needs from SGLang `/generate` and OpenAI chat responses
//! (JSON bodies and SSE chunks): token counts, `cached_tokens`, output token ids,
//! finish reason and error messages. Unknown fields are ignored.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// What one response said about its request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResponseInfo {
    /// `meta_info.prompt_tokens`, else `usage.prompt_tokens`.
    pub prompt_tokens: Option<u64>,
    /// `meta_info.cached_tokens`, else `usage.prompt_tokens_details.cached_tokens`.
    pub cached_tokens: Option<u64>,
    /// `meta_info.completion_tokens`, else `usage.completion_tokens`.
    pub completion_tokens: Option<u64>,
    /// Generated token ids: `output_ids`, else the ids in `meta_info.output_token_logprobs`.
    pub output_ids: Option<Vec<u32>>,
    /// `finish_reason` (`stop`, `length`, `abort`, ...).
    pub finish_reason: Option<String>,
    /// An error reported in the body (`{"error":...}` or OpenAI `{"object":"error"}`).
    pub error: Option<String>,
}

impl ResponseInfo {
    /// True when the request was aborted by the server.
    pub fn aborted(&self) -> bool {
        self.finish_reason.as_deref() == Some("abort")
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Wire {
    output_ids: Option<Vec<u32>>,
    meta_info: Option<MetaInfo>,
    choices: Vec<Choice>,
    usage: Option<Usage>,
    error: Option<Value>,
    object: Option<String>,
    message: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct MetaInfo {
    prompt_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    finish_reason: Option<Value>,
    output_ids: Option<Vec<u32>>,
    /// Kept raw: parsed only when no `output_ids` carry the ids (it is the largest field).
    output_token_logprobs: Option<Box<RawValue>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Choice {
    finish_reason: Option<Value>,
    meta_info: Option<MetaInfo>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Usage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PromptTokensDetails {
    cached_tokens: Option<u64>,
}

/// Parses one complete JSON body (non-streaming response or error body).
pub fn parse_body(bytes: &[u8]) -> ResponseInfo {
    match serde_json::from_slice::<Wire>(bytes) {
        Ok(wire) => wire.into_info(),
        Err(_) => ResponseInfo {
            error: Some(format!("unparseable body: {}", snippet(bytes))),
            ..ResponseInfo::default()
        },
    }
}

/// The start of a body, for error messages.
pub fn snippet(bytes: &[u8]) -> String {
    const MAX: usize = 200;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX)]);
    let mut s = text.trim().to_string();
    if bytes.len() > MAX {
        s.push('…');
    }
    s
}

impl Wire {
    fn into_info(self) -> ResponseInfo {
        let mut info = ResponseInfo::default();
        if let Some(e) = &self.error {
            info.error = Some(error_message(e));
        } else if self.object.as_deref() == Some("error") {
            info.error = Some(self.message.clone().unwrap_or_else(|| "error".into()));
        }
        let choice = self.choices.into_iter().next();
        let choice_finish = choice.as_ref().and_then(|c| c.finish_reason.clone());
        let meta = self.meta_info.or(choice.and_then(|c| c.meta_info));
        if let Some(meta) = meta {
            info.prompt_tokens = meta.prompt_tokens;
            info.cached_tokens = meta.cached_tokens;
            info.completion_tokens = meta.completion_tokens;
            info.finish_reason = meta.finish_reason.as_ref().and_then(finish_kind);
            info.output_ids = match (self.output_ids, meta.output_ids) {
                (Some(ids), _) | (None, Some(ids)) => Some(ids),
                (None, None) => meta.output_token_logprobs.as_deref().and_then(logprob_ids),
            };
        } else {
            info.output_ids = self.output_ids;
        }
        if let Some(usage) = self.usage {
            info.prompt_tokens = info.prompt_tokens.or(usage.prompt_tokens);
            info.completion_tokens = info.completion_tokens.or(usage.completion_tokens);
            info.cached_tokens = info
                .cached_tokens
                .or(usage.prompt_tokens_details.and_then(|d| d.cached_tokens));
        }
        if info.finish_reason.is_none() {
            info.finish_reason = choice_finish.as_ref().and_then(finish_kind);
        }
        info
    }
}

/// Token ids of `[[logprob, token_id, text?], ...]`.
fn logprob_ids(raw: &RawValue) -> Option<Vec<u32>> {
    let entries: Vec<Vec<Value>> = serde_json::from_str(raw.get()).ok()?;
    Some(
        entries
            .iter()
            .filter_map(|t| t.get(1).and_then(Value::as_u64))
            .map(|id| id as u32)
            .collect(),
    )
}

/// `"stop"` or `{"type":"stop",...}` -> `stop`.
fn finish_kind(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("type").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

fn error_message(e: &Value) -> String {
    match e {
        Value::String(s) => s.clone(),
        Value::Object(o) => o
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| e.to_string()),
        other => other.to_string(),
    }
}

/// Folds the SSE data payloads of one streamed response into a `ResponseInfo`.
///
/// `/generate` chunks are full objects (cumulative by default, deltas with
/// `--incremental-streaming-output`): the last chunk's counts win, and output ids
/// are replaced when a chunk holds all `completion_tokens` of them, else appended.
/// Chat chunks carry counts only in a `usage` chunk (`stream_options.include_usage`).
#[derive(Debug, Default)]
pub struct StreamFold {
    info: ResponseInfo,
    data_chunks: usize,
    done: bool,
}

impl StreamFold {
    pub fn new() -> StreamFold {
        StreamFold::default()
    }

    /// Takes one event's data; returns true if it was a data chunk (not `[DONE]`).
    pub fn push(&mut self, data: &str) -> bool {
        if data.trim() == "[DONE]" {
            self.done = true;
            return false;
        }
        self.data_chunks += 1;
        let chunk = parse_body(data.as_bytes());
        let info = &mut self.info;
        if chunk.error.is_some() {
            info.error = chunk.error;
        }
        if let Some(ids) = chunk.output_ids {
            let cumulative = chunk.completion_tokens == Some(ids.len() as u64);
            match &mut info.output_ids {
                Some(all) if !cumulative => all.extend(ids),
                _ => info.output_ids = Some(ids),
            }
        }
        info.prompt_tokens = chunk.prompt_tokens.or(info.prompt_tokens);
        info.cached_tokens = chunk.cached_tokens.or(info.cached_tokens);
        info.completion_tokens = chunk.completion_tokens.or(info.completion_tokens);
        info.finish_reason = chunk.finish_reason.or(info.finish_reason.take());
        true
    }

    /// Data chunks seen so far.
    pub fn data_chunks(&self) -> usize {
        self.data_chunks
    }

    /// The folded result; a stream that never sent `[DONE]` is an error.
    pub fn finish(mut self) -> ResponseInfo {
        if !self.done && self.info.error.is_none() {
            self.info.error = Some("stream ended without data: [DONE]".into());
        }
        self.info
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GENERATE: &str = r#"{"text":" The capital","output_ids":[576,6722,3],
        "meta_info":{"id":"6b33","finish_reason":{"type":"length","length":3},
        "prompt_tokens":7,"weight_version":"default","completion_tokens":3,
        "cached_tokens":4,"e2e_latency":0.92}}"#;

    #[test]
    fn generate_body() {
        let info = parse_body(GENERATE.as_bytes());
        assert_eq!(info.prompt_tokens, Some(7));
        assert_eq!(info.cached_tokens, Some(4));
        assert_eq!(info.completion_tokens, Some(3));
        assert_eq!(info.output_ids, Some(vec![576, 6722, 3]));
        assert_eq!(info.finish_reason.as_deref(), Some("length"));
        assert_eq!(info.error, None);
    }

    #[test]
    fn chat_body_with_meta_info_as_miles_reads_it() {
        let body = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,
            "message":{"role":"assistant","content":"hi"},"finish_reason":"length",
            "meta_info":{"prompt_tokens":40,"cached_tokens":32,"completion_tokens":2,
              "output_token_logprobs":[[-0.1,11,null],[-0.2,12,null]]}}],
            "usage":{"prompt_tokens":40,"completion_tokens":2,"total_tokens":42}}"#;
        let info = parse_body(body.as_bytes());
        assert_eq!(info.prompt_tokens, Some(40));
        assert_eq!(info.cached_tokens, Some(32));
        assert_eq!(info.output_ids, Some(vec![11, 12]));
        assert_eq!(info.finish_reason.as_deref(), Some("length"));
    }

    #[test]
    fn chat_body_with_usage_only() {
        let body = r#"{"choices":[{"finish_reason":"stop"}],
            "usage":{"prompt_tokens":40,"completion_tokens":2,
              "prompt_tokens_details":{"cached_tokens":16}}}"#;
        let info = parse_body(body.as_bytes());
        assert_eq!(info.prompt_tokens, Some(40));
        assert_eq!(info.cached_tokens, Some(16));
        assert_eq!(info.completion_tokens, Some(2));
        assert_eq!(info.output_ids, None);
        assert_eq!(info.finish_reason.as_deref(), Some("stop"));
    }

    #[test]
    fn error_shapes() {
        let sglang = parse_body(br#"{"error":{"message":"bad input_ids"}}"#);
        assert_eq!(sglang.error.as_deref(), Some("bad input_ids"));
        let openai =
            parse_body(br#"{"object":"error","message":"too long","type":"x","code":400}"#);
        assert_eq!(openai.error.as_deref(), Some("too long"));
        let junk = parse_body(b"<html>oops</html>");
        assert!(junk.error.unwrap().contains("<html>oops</html>"));
        let abort =
            parse_body(br#"{"meta_info":{"finish_reason":{"type":"abort","message":"x"}}}"#);
        assert!(abort.aborted());
    }

    #[test]
    fn cumulative_generate_stream() {
        let mut f = StreamFold::new();
        assert!(f.push(r#"{"output_ids":[5],"meta_info":{"prompt_tokens":9,"cached_tokens":0,"completion_tokens":1,"finish_reason":null}}"#));
        assert!(f.push(r#"{"output_ids":[5,6],"meta_info":{"prompt_tokens":9,"cached_tokens":0,"completion_tokens":2,"finish_reason":null}}"#));
        assert!(f.push(r#"{"output_ids":[5,6,7],"meta_info":{"prompt_tokens":9,"cached_tokens":8,"completion_tokens":3,"finish_reason":{"type":"length","length":3}}}"#));
        assert!(!f.push("[DONE]"));
        assert_eq!(f.data_chunks(), 3);
        let info = f.finish();
        assert_eq!(info.output_ids, Some(vec![5, 6, 7]));
        assert_eq!(info.cached_tokens, Some(8));
        assert_eq!(info.completion_tokens, Some(3));
        assert_eq!(info.finish_reason.as_deref(), Some("length"));
        assert_eq!(info.error, None);
    }

    #[test]
    fn incremental_generate_stream() {
        let mut f = StreamFold::new();
        f.push(r#"{"output_ids":[5],"meta_info":{"completion_tokens":1}}"#);
        f.push(r#"{"output_ids":[6],"meta_info":{"completion_tokens":2}}"#);
        f.push(r#"{"output_ids":[7],"meta_info":{"completion_tokens":3}}"#);
        f.push("[DONE]");
        assert_eq!(f.finish().output_ids, Some(vec![5, 6, 7]));
    }

    #[test]
    fn chat_stream_with_usage_chunk() {
        let mut f = StreamFold::new();
        f.push(r#"{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#);
        f.push(r#"{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}"#);
        f.push(r#"{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#);
        f.push(r#"{"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":16}}}"#);
        f.push("[DONE]");
        let info = f.finish();
        assert_eq!(info.finish_reason.as_deref(), Some("length"));
        assert_eq!(info.prompt_tokens, Some(20));
        assert_eq!(info.cached_tokens, Some(16));
        assert_eq!(info.output_ids, None);
    }

    #[test]
    fn error_chunk_and_missing_done() {
        let mut f = StreamFold::new();
        f.push(r#"{"error":{"message":"boom"}}"#);
        f.push("[DONE]");
        assert_eq!(f.finish().error.as_deref(), Some("boom"));
        let mut f = StreamFold::new();
        f.push(r#"{"output_ids":[1],"meta_info":{"completion_tokens":1}}"#);
        assert!(f.finish().error.unwrap().contains("[DONE]"));
    }
}
