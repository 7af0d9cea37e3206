//! `--text` chat requests: OpenAI `messages` only, no `input_ids`, so the server (and a
//! KV router) must tokenize them with the model's tokenizer and chat template.
//!
//! A request's token ids become words: id `N` is the word `t<N>`, joined by spaces, which
//! round-trips through the mock's stand-in tokenizer and through a WordLevel tokenizer whose
//! word `t<N>` is token `N` (the fixture the tests and docs/text-routing.md use). The agent's
//! context is split into messages by `RequestSpec::text_segments`: `system` (shared prefix),
//! `user` (the task), then per turn `assistant` (the model's output ids) and `user` (the
//! tool output). Without segments the whole prompt is one user message.

use serde::Serialize;

use super::request::{BodyOptions, ChatBody, RequestSpec};

/// One chat message.
#[derive(Serialize)]
pub struct Message {
    pub role: &'static str,
    pub content: String,
}

/// The words of `ids` (`t<N>` per id, space-separated).
pub fn words(ids: &[u32]) -> String {
    let mut s = String::with_capacity(ids.len() * 6);
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        s.push('t');
        s.push_str(&id.to_string());
    }
    s
}

/// The conversation of `ids` split by `segments` (see module docs).
pub fn messages(ids: &[u32], segments: Option<&[u32]>) -> Vec<Message> {
    let Some(segments) = segments else {
        return vec![Message {
            role: "user",
            content: words(ids),
        }];
    };
    let mut out = Vec::with_capacity(segments.len());
    let mut at = 0usize;
    for (i, &len) in segments.iter().enumerate() {
        let end = (at + len as usize).min(ids.len());
        let role = match i {
            0 => "system",
            i if i % 2 == 0 => "assistant",
            _ => "user",
        };
        out.push(Message {
            role,
            content: words(&ids[at..end]),
        });
        at = end;
    }
    if at < ids.len() {
        out.push(Message {
            role: "user",
            content: words(&ids[at..]),
        });
    }
    out
}

/// The JSON body of a `--text` chat request.
pub fn body(opts: &BodyOptions, spec: &RequestSpec) -> Vec<u8> {
    let messages = messages(&spec.input_ids, spec.text_segments.as_deref());
    serde_json::to_vec(&ChatBody::new(opts, spec, messages, None, None)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::config::Endpoint;
    use serde_json::{json, Value};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn agent_context_becomes_alternating_messages_without_ids() {
        let spec = RequestSpec {
            tag: "t".into(),
            input_ids: Arc::from(vec![1u32, 2, 3, 4, 5, 6, 7]),
            max_new_tokens: 4,
            sampling_seed: None,
            routing_key: None,
            affinity: 0,
            scheduled: Duration::ZERO,
            batch: None,
            text_segments: Some(Arc::from(vec![2u32, 1, 3, 1])),
        };
        let opts = BodyOptions {
            endpoint: Endpoint::ChatText,
            stream: false,
            model: "m".into(),
            return_logprob: false,
        };
        let v: Value = serde_json::from_slice(&opts.body(&spec)).unwrap();
        assert!(v.get("input_ids").is_none());
        assert_eq!(
            v["messages"],
            json!([
                {"role": "system", "content": "t1 t2"},
                {"role": "user", "content": "t3"},
                {"role": "assistant", "content": "t4 t5 t6"},
                {"role": "user", "content": "t7"},
            ])
        );
        assert_eq!(v["return_meta_info"], json!(true));
    }
}
