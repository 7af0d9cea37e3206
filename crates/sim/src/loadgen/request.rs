//! One request a workload wants sent (`RequestSpec`) and its JSON body for each
//! endpoint, shaped the way miles sends them (see `docs/loadgen.md`).

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::config::Endpoint;

/// A request as a workload plans it; the runner picks the URL and sends it.
#[derive(Clone, Debug)]
pub struct RequestSpec {
    /// Human-readable origin, e.g. `g3/s1` (group 3, sample 1) or `sess2/t0`.
    pub tag: String,
    /// Prompt token ids (shared by GRPO siblings).
    pub input_ids: Arc<[u32]>,
    /// Output length asked for.
    pub max_new_tokens: u32,
    /// `sampling_params.sampling_seed` (generate) / `seed` (chat).
    pub sampling_seed: Option<u64>,
    /// Sent as `X-SMG-Routing-Key`.
    pub routing_key: Option<String>,
    /// Picks the URL under `--url-pick sticky`.
    pub affinity: u64,
    /// When the workload meant to send it, wall time from the start of the run.
    pub scheduled: Duration,
    /// The rollout batch it belongs to (makespans are measured per batch).
    pub batch: Option<u32>,
    /// Lengths of the conversation's messages in `input_ids` (agent sessions), for text chat.
    pub text_segments: Option<Arc<[u32]>>,
}

/// Body options that hold for every request of a run.
#[derive(Clone, Debug)]
pub struct BodyOptions {
    pub endpoint: Endpoint,
    pub stream: bool,
    pub model: String,
    pub return_logprob: bool,
}

#[derive(Serialize)]
struct GenerateBody<'a> {
    input_ids: &'a [u32],
    sampling_params: SamplingParams,
    return_logprob: bool,
    stream: bool,
}

#[derive(Serialize)]
struct SamplingParams {
    max_new_tokens: u32,
    temperature: f32,
    top_p: f32,
    ignore_eos: bool,
    no_stop_trim: bool,
    skip_special_tokens: bool,
    spaces_between_special_tokens: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    sampling_seed: Option<u64>,
}

/// A chat completion body: the `input_ids` chat (miles' session server) and the `--text`
/// chat differ only in their messages and the fields they leave out.
#[derive(Serialize)]
pub(super) struct ChatBody<'a, M> {
    model: &'a str,
    messages: M,
    #[serde(skip_serializing_if = "Option::is_none")]
    input_ids: Option<&'a [u32]>,
    max_tokens: u32,
    temperature: f32,
    ignore_eos: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    no_stop_trim: Option<bool>,
    logprobs: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    return_meta_info: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

impl<'a, M: Serialize> ChatBody<'a, M> {
    /// The body of `spec` under `opts` with `messages`. As miles' session server:
    /// return_meta_info and logprobs as asked; SGLang rejects return_meta_info with stream, so
    /// streams ask for usage instead.
    pub(super) fn new(
        opts: &'a BodyOptions,
        spec: &'a RequestSpec,
        messages: M,
        input_ids: Option<&'a [u32]>,
        no_stop_trim: Option<bool>,
    ) -> Self {
        ChatBody {
            model: &opts.model,
            messages,
            input_ids,
            max_tokens: spec.max_new_tokens,
            temperature: 1.0,
            ignore_eos: true,
            no_stop_trim,
            logprobs: opts.return_logprob,
            return_meta_info: (!opts.stream).then_some(true),
            seed: spec.sampling_seed,
            stream: opts.stream,
            stream_options: opts.stream.then_some(StreamOptions {
                include_usage: true,
            }),
        }
    }
}

#[derive(Serialize)]
struct Message {
    role: &'static str,
    content: &'static str,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// Placeholder text of the chat message; the server reads the prompt from `input_ids`.
pub const CHAT_PLACEHOLDER: &str = "(pre-tokenized prompt in input_ids)";

impl BodyOptions {
    /// The JSON body of `spec` for this run's endpoint.
    pub fn body(&self, spec: &RequestSpec) -> Vec<u8> {
        let result = match self.endpoint {
            Endpoint::Generate => serde_json::to_vec(&GenerateBody {
                input_ids: &spec.input_ids,
                sampling_params: SamplingParams {
                    max_new_tokens: spec.max_new_tokens,
                    temperature: 1.0,
                    top_p: 1.0,
                    ignore_eos: true,
                    no_stop_trim: true,
                    skip_special_tokens: false,
                    spaces_between_special_tokens: false,
                    sampling_seed: spec.sampling_seed,
                },
                return_logprob: self.return_logprob,
                stream: self.stream,
            }),
            // `--text`: messages only (`text_chat.rs`); no_stop_trim left out.
            Endpoint::ChatText => serde_json::to_vec(&ChatBody::new(
                self,
                spec,
                super::text_chat::messages(&spec.input_ids, spec.text_segments.as_deref()),
                None,
                None,
            )),
            // no_stop_trim false as miles' session server.
            Endpoint::Chat => serde_json::to_vec(&ChatBody::new(
                self,
                spec,
                [Message {
                    role: "user",
                    content: CHAT_PLACEHOLDER,
                }],
                Some(&spec.input_ids),
                Some(false),
            )),
        };
        // Serialising plain structs of numbers and strings cannot fail.
        result.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn spec() -> RequestSpec {
        RequestSpec {
            tag: "t".into(),
            input_ids: Arc::from(vec![1u32, 2, 3]),
            max_new_tokens: 8,
            sampling_seed: Some(5),
            routing_key: None,
            affinity: 0,
            scheduled: Duration::ZERO,
            batch: None,
            text_segments: None,
        }
    }

    fn opts(endpoint: Endpoint, stream: bool) -> BodyOptions {
        BodyOptions {
            endpoint,
            stream,
            model: "default".into(),
            return_logprob: true,
        }
    }

    #[test]
    fn generate_body_as_miles_sends_it() {
        let v: Value =
            serde_json::from_slice(&opts(Endpoint::Generate, false).body(&spec())).unwrap();
        assert_eq!(v["input_ids"], json!([1, 2, 3]));
        assert_eq!(v["return_logprob"], json!(true));
        assert_eq!(v["stream"], json!(false));
        assert_eq!(v["sampling_params"]["max_new_tokens"], json!(8));
        assert_eq!(v["sampling_params"]["sampling_seed"], json!(5));
        assert_eq!(v["sampling_params"]["no_stop_trim"], json!(true));
    }

    #[test]
    fn chat_body_as_the_session_server_sends_it() {
        let v: Value = serde_json::from_slice(&opts(Endpoint::Chat, false).body(&spec())).unwrap();
        assert_eq!(v["input_ids"], json!([1, 2, 3]));
        assert_eq!(v["return_meta_info"], json!(true));
        assert_eq!(v["logprobs"], json!(true));
        assert_eq!(v["no_stop_trim"], json!(false));
        assert_eq!(v["max_tokens"], json!(8));
        assert_eq!(v["messages"][0]["role"], json!("user"));
        assert!(v.get("stream_options").is_none());
    }

    #[test]
    fn text_chat_sends_the_agent_context_as_alternating_messages_without_ids() {
        let spec = RequestSpec {
            input_ids: Arc::from(vec![1u32, 2, 3, 4, 5, 6, 7]),
            text_segments: Some(Arc::from(vec![2u32, 1, 3, 1])),
            ..spec()
        };
        let v: Value =
            serde_json::from_slice(&opts(Endpoint::ChatText, false).body(&spec)).unwrap();
        assert!(v.get("input_ids").is_none());
        assert!(v.get("no_stop_trim").is_none());
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

    #[test]
    fn streamed_chat_asks_for_usage_instead_of_meta_info() {
        let v: Value = serde_json::from_slice(&opts(Endpoint::Chat, true).body(&spec())).unwrap();
        assert_eq!(v["stream"], json!(true));
        assert!(v.get("return_meta_info").is_none());
        assert_eq!(v["stream_options"]["include_usage"], json!(true));
    }
}
