//! OpenAI-compatible routes: `/v1/chat/completions` (messages rendered by the stand-in
//! template, or pre-tokenized `input_ids` as miles sends them; `return_meta_info` puts
//! SGLang's `meta_info` on each choice), `/v1/completions`, `/v1/models[/{id}]`.
//! Streams follow SGLang: role chunk, incremental content deltas, a finish chunk per
//! choice, an optional usage chunk, `data: [DONE]`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::StatusCode;
use serde::Deserialize;
use serde_json::{json, Value};

use super::meta::{meta_info, output_text, MetaArgs};
use super::parse::{self, ItemInfo, Prompt, SamplingParams};
use super::respond::{
    ok, openai_error, sse, sse_error, sse_event, status_of, Resp, SseBody, SseFormatter,
};
use crate::mock::engine::{Done, Reply};
use crate::mock::state::MockState;
use crate::mock::tokenizer;

#[derive(Deserialize, Default)]
struct StreamOptions {
    include_usage: Option<bool>,
}

/// Fields common to chat and completions requests.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Common {
    model: Option<String>,
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    min_tokens: Option<i64>,
    n: Option<i64>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i64>,
    min_p: Option<f64>,
    seed: Option<u64>,
    stop_token_ids: Option<Vec<i64>>,
    ignore_eos: Option<bool>,
    rid: Option<String>,
    return_meta_info: Option<bool>,
    routed_dp_rank: Option<Value>,
    data_parallel_rank: Option<Value>,
}

#[derive(Deserialize)]
struct ChatBody {
    messages: Option<Vec<Value>>,
    input_ids: Option<Vec<i64>>,
    logprobs: Option<bool>,
    #[serde(flatten)]
    common: Common,
}

#[derive(Deserialize)]
struct CompletionBody {
    prompt: Option<Value>,
    logprobs: Option<i64>,
    #[serde(flatten)]
    common: Common,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Chat,
    Completion,
}

/// Settings of one OpenAI call the response side needs.
struct Call {
    kind: Kind,
    id: String,
    model: String,
    created: u64,
    items: Vec<ItemInfo>,
    logprobs: bool,
    meta: bool,
    include_usage: bool,
    n: usize,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Common {
    fn sampling(&self, default_max: i64) -> SamplingParams {
        SamplingParams {
            max_new_tokens: Some(
                self.max_completion_tokens
                    .or(self.max_tokens)
                    .unwrap_or(default_max),
            ),
            min_new_tokens: self.min_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            ignore_eos: self.ignore_eos,
            stop_token_ids: self.stop_token_ids.clone(),
            n: self.n,
            sampling_seed: self.seed,
        }
    }
}

/// Handles `/v1/chat/completions`.
pub async fn chat(state: &Arc<MockState>, bytes: &[u8]) -> Resp {
    let b: ChatBody = match parse::body(bytes) {
        Ok(b) => b,
        Err(m) => return openai_error(StatusCode::BAD_REQUEST, m),
    };
    let vocab = state.args.vocab_size;
    let tokens = match (&b.input_ids, &b.messages) {
        (Some(ids), _) => parse::token_ids(ids, vocab),
        (None, Some(m)) if m.is_empty() => Err("messages must not be empty.".to_string()),
        (None, Some(m)) => tokenizer::chat_ids(bytes, m, vocab),
        (None, None) => Err("messages is required.".to_string()),
    };
    let tokens = match tokens {
        Ok(t) => t,
        Err(m) => return openai_error(StatusCode::BAD_REQUEST, m),
    };
    let logprobs = b.logprobs.unwrap_or(false);
    run(state, Kind::Chat, vec![tokens], b.common, logprobs, bytes).await
}

/// Handles `/v1/completions`.
pub async fn completions(state: &Arc<MockState>, bytes: &[u8]) -> Resp {
    let b: CompletionBody = match parse::body(bytes) {
        Ok(b) => b,
        Err(m) => return openai_error(StatusCode::BAD_REQUEST, m),
    };
    let prompts = match completion_prompts(b.prompt.as_ref(), state.args.vocab_size) {
        Ok(p) => p,
        Err(m) => return openai_error(StatusCode::BAD_REQUEST, m),
    };
    run(
        state,
        Kind::Completion,
        prompts,
        b.common,
        b.logprobs.is_some(),
        bytes,
    )
    .await
}

fn completion_prompts(prompt: Option<&Value>, vocab: u32) -> Result<Vec<Vec<u32>>, String> {
    let text = |s: &str| {
        let ids = tokenizer::encode(s, vocab);
        if ids.is_empty() {
            Err("prompt is empty.".to_string())
        } else {
            Ok(ids)
        }
    };
    let ids = |v: &[Value]| -> Result<Vec<u32>, String> {
        let raw: Option<Vec<i64>> = v.iter().map(Value::as_i64).collect();
        parse::token_ids(&raw.ok_or("prompt token ids must be integers.")?, vocab)
    };
    match prompt {
        None | Some(Value::Null) => Err("prompt is required.".into()),
        Some(Value::String(s)) => Ok(vec![text(s)?]),
        Some(Value::Array(a)) if a.is_empty() => Err("prompt is empty.".into()),
        Some(Value::Array(a)) => match &a[0] {
            Value::String(_) => a
                .iter()
                .map(|x| {
                    x.as_str()
                        .ok_or("prompt list mixes types.".to_string())
                        .and_then(text)
                })
                .collect(),
            Value::Array(_) => a
                .iter()
                .map(|x| {
                    x.as_array()
                        .ok_or("prompt list mixes types.".to_string())
                        .and_then(|v| ids(v))
                })
                .collect(),
            _ => Ok(vec![ids(a)?]),
        },
        Some(_) => Err("prompt must be a string, a list of strings or token ids.".into()),
    }
}

async fn run(
    state: &Arc<MockState>,
    kind: Kind,
    prompts: Vec<Vec<u32>>,
    common: Common,
    logprobs: bool,
    bytes: &[u8],
) -> Resp {
    let start = Instant::now();
    let stream = common.stream.unwrap_or(false);
    let meta = common.return_meta_info.unwrap_or(false);
    if stream && meta {
        return openai_error(
            StatusCode::BAD_REQUEST,
            "return_meta_info is not supported with stream=true.",
        );
    }
    let default_max = if kind == Kind::Chat { 128 } else { 16 };
    let params = common.sampling(default_max);
    let n = params.n();
    let rank = match parse::requested_rank(
        state,
        common
            .routed_dp_rank
            .as_ref()
            .or(common.data_parallel_rank.as_ref()),
    ) {
        Ok(r) => r,
        Err(m) => return openai_error(StatusCode::BAD_REQUEST, m),
    };
    let rids = match parse::expand_rids(
        common.rid.clone().map(parse::OneOrMany::One),
        prompts.len(),
        prompts.len() > 1,
    ) {
        Ok(r) => r,
        Err(m) => return openai_error(StatusCode::BAD_REQUEST, m),
    };
    let namespaces = match super::namespace::for_call(state, bytes, prompts.len(), true) {
        Ok(n) => n,
        Err(m) => return openai_error(StatusCode::BAD_REQUEST, m),
    };
    let prompts: Vec<Prompt> = prompts
        .into_iter()
        .zip(rids)
        .zip(namespaces)
        .map(|((tokens, rid), ns)| Prompt {
            tokens,
            params: params.clone(),
            rid,
            ns,
        })
        .collect();
    let job = match parse::build_job(state, prompts, stream, rank, default_max as usize) {
        Ok(j) => j,
        Err(m) => return openai_error(StatusCode::BAD_REQUEST, m),
    };
    let path = if kind == Kind::Chat {
        "/v1/chat/completions"
    } else {
        "/v1/completions"
    };
    if state.hooks.take_failure(path) {
        return openai_error(StatusCode::INTERNAL_SERVER_ERROR, "mock: injected failure");
    }
    let call = Call {
        kind,
        id: job.items.first().map(|i| i.rid.clone()).unwrap_or_default(),
        model: common
            .model
            .clone()
            .unwrap_or_else(|| state.args.model_name().to_string()),
        created: now_secs(),
        items: job.items,
        logprobs,
        meta,
        include_usage: common
            .stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
        n,
    };
    let mut rx = match crate::mock::pd::dispatch::dispatch(state, bytes, job.reqs, job.rx) {
        Ok(rx) => rx,
        Err(m) => return openai_error(StatusCode::BAD_REQUEST, m),
    };
    if stream {
        let count = call.items.len();
        let fmt = OpenAiSse {
            state: state.clone(),
            start,
            call,
            streamed: vec![0; count],
            started: vec![false; count],
            done: Vec::new(),
            remaining: count,
        };
        return sse(SseBody::new(rx, Box::new(fmt), Vec::new()));
    }
    let mut done: Vec<Option<Box<Done>>> = (0..call.items.len()).map(|_| None).collect();
    let mut left = done.len();
    while left > 0 {
        match rx.recv().await {
            Some(Reply::Done(d)) => {
                if let Some(slot) = done.get_mut(d.index as usize) {
                    *slot = Some(d);
                    left -= 1;
                }
            }
            Some(Reply::Step { .. }) => {}
            Some(Reply::Failed { status, message }) => {
                return openai_error(status_of(status), message)
            }
            None => return openai_error(StatusCode::INTERNAL_SERVER_ERROR, "engine stopped"),
        }
    }
    let e2e = start.elapsed().as_secs_f64();
    state.metrics.observe_e2e(e2e);
    let done: Vec<Box<Done>> = done.into_iter().flatten().collect();
    ok(&full_response(state, &call, &done, e2e))
}

fn choice_logprobs(kind: Kind, d: &Done) -> Value {
    match kind {
        Kind::Chat => {
            let content: Vec<Value> = d
                .output_ids
                .iter()
                .zip(&d.logprobs)
                .map(|(t, lp)| json!({"token": format!(" t{t}"), "logprob": lp, "bytes": null, "top_logprobs": []}))
                .collect();
            json!({"content": content})
        }
        Kind::Completion => {
            let tokens: Vec<String> = d.output_ids.iter().map(|t| format!(" t{t}")).collect();
            json!({"tokens": tokens, "token_logprobs": d.logprobs, "top_logprobs": [], "text_offset": []})
        }
    }
}

fn usage<D: std::borrow::Borrow<Done>>(call: &Call, done: &[D]) -> Value {
    let step = call.n.max(1);
    let prompt: usize = done
        .iter()
        .step_by(step)
        .map(|d| d.borrow().prompt_tokens)
        .sum();
    let cached: usize = done
        .iter()
        .step_by(step)
        .map(|d| d.borrow().cached_tokens)
        .sum();
    let completion: usize = done.iter().map(|d| d.borrow().output_ids.len()).sum();
    json!({
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "reasoning_tokens": 0
    })
}

fn meta_of(state: &MockState, d: &Done, logprobs: bool, e2e: Option<f64>, finish: bool) -> Value {
    meta_info(&MetaArgs {
        rid: &d.rid,
        prompt_tokens: d.prompt_tokens,
        output_ids: &d.output_ids,
        logprobs: &d.logprobs,
        cached_tokens: d.cached_tokens,
        cached_split: d.cached_split,
        finish: finish.then_some(&d.finish),
        weight_version: &d.weight_version,
        dp_rank: (state.ranks.len() > 1).then_some(d.dp_rank),
        e2e_latency: e2e,
        retractions: d.retractions,
        timings: finish.then(|| d.timings()),
        return_logprob: logprobs,
        input_logprobs: &d.input_logprobs,
    })
}

fn full_response(state: &MockState, call: &Call, done: &[Box<Done>], e2e: f64) -> Value {
    let choices: Vec<Value> = done
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let text = output_text(&d.output_ids);
            let mut c = match call.kind {
                Kind::Chat => json!({
                    "index": i,
                    "message": {"role": "assistant", "content": text, "reasoning_content": null, "tool_calls": null},
                    "logprobs": if call.logprobs { choice_logprobs(call.kind, d) } else { Value::Null },
                    "finish_reason": d.finish.openai(),
                    "matched_stop": d.finish.matched_stop(),
                }),
                Kind::Completion => json!({
                    "index": i,
                    "text": text,
                    "logprobs": if call.logprobs { choice_logprobs(call.kind, d) } else { Value::Null },
                    "finish_reason": d.finish.openai(),
                    "matched_stop": d.finish.matched_stop(),
                }),
            };
            if call.meta {
                if let Some(o) = c.as_object_mut() {
                    o.insert("meta_info".into(), meta_of(state, d, call.logprobs, Some(e2e), true));
                }
            }
            c
        })
        .collect();
    let object = if call.kind == Kind::Chat {
        "chat.completion"
    } else {
        "text_completion"
    };
    let version = done
        .first()
        .map(|d| d.weight_version.to_string())
        .unwrap_or_default();
    json!({
        "id": call.id,
        "object": object,
        "created": call.created,
        "model": call.model,
        "choices": choices,
        "usage": usage(call, done),
        "metadata": {"weight_version": version},
    })
}

/// Incremental OpenAI stream.
struct OpenAiSse {
    state: Arc<MockState>,
    start: Instant,
    call: Call,
    streamed: Vec<usize>,
    started: Vec<bool>,
    done: Vec<Done>,
    remaining: usize,
}

impl OpenAiSse {
    fn chunk(&self, choice: Value) -> Bytes {
        let object = if self.call.kind == Kind::Chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        sse_event(&json!({
            "id": self.call.id,
            "object": object,
            "created": self.call.created,
            "model": self.call.model,
            "choices": [choice],
            "usage": null,
        }))
    }

    fn content(&self, index: usize, text: String, finish: Option<&Done>) -> Value {
        let (reason, matched) = match finish {
            Some(d) => (Value::from(d.finish.openai()), d.finish.matched_stop()),
            None => (Value::Null, Value::Null),
        };
        match self.call.kind {
            Kind::Chat => {
                let delta = if finish.is_some() && text.is_empty() {
                    json!({})
                } else {
                    json!({"content": text})
                };
                json!({"index": index, "delta": delta, "logprobs": null, "finish_reason": reason, "matched_stop": matched})
            }
            Kind::Completion => {
                json!({"index": index, "text": text, "logprobs": null, "finish_reason": reason, "matched_stop": matched})
            }
        }
    }

    fn ensure_role(&mut self, index: usize, out: &mut VecDeque<Bytes>) {
        if self.call.kind == Kind::Chat && !self.started[index] {
            self.started[index] = true;
            let c = json!({"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null, "matched_stop": null});
            out.push_back(self.chunk(c));
        }
    }
}

impl SseFormatter for OpenAiSse {
    fn on_reply(&mut self, reply: Reply, out: &mut VecDeque<Bytes>) -> bool {
        match reply {
            Reply::Step { index, token, .. } => {
                let i = index as usize;
                if i >= self.streamed.len() {
                    return false;
                }
                self.ensure_role(i, out);
                self.streamed[i] += 1;
                let c = self.content(i, format!(" t{token}"), None);
                out.push_back(self.chunk(c));
                false
            }
            Reply::Failed { status, message } => {
                out.push_back(sse_error(status, &message));
                true
            }
            Reply::Done(d) => {
                let i = d.index as usize;
                if i >= self.streamed.len() {
                    return false;
                }
                self.ensure_role(i, out);
                let rest = d.output_ids.get(self.streamed[i]..).unwrap_or(&[]);
                if !rest.is_empty() {
                    let c = self.content(i, output_text(rest), None);
                    out.push_back(self.chunk(c));
                }
                let c = self.content(i, String::new(), Some(&d));
                out.push_back(self.chunk(c));
                self.done.push(*d);
                self.remaining -= 1;
                if self.remaining > 0 {
                    return false;
                }
                let e2e = self.start.elapsed().as_secs_f64();
                self.state.metrics.observe_e2e(e2e);
                if self.call.include_usage {
                    self.done.sort_by_key(|d| d.index);
                    let object = if self.call.kind == Kind::Chat {
                        "chat.completion.chunk"
                    } else {
                        "text_completion"
                    };
                    out.push_back(sse_event(&json!({
                        "id": self.call.id,
                        "object": object,
                        "created": self.call.created,
                        "model": self.call.model,
                        "choices": [],
                        "usage": usage(&self.call, &self.done),
                    })));
                }
                true
            }
        }
    }
}

/// `GET /v1/models`.
pub fn models(state: &MockState) -> Resp {
    ok(&json!({"object": "list", "data": [model_card(state)]}))
}

/// `GET /v1/models/{id}`.
pub fn model(state: &MockState, id: &str) -> Resp {
    if id == state.args.model_name() {
        ok(&model_card(state))
    } else {
        super::respond::json(
            StatusCode::NOT_FOUND,
            &json!({"error": {"message": format!("The model '{id}' does not exist"), "type": "invalid_request_error", "param": "model", "code": "model_not_found"}}),
        )
    }
}

fn model_card(state: &MockState) -> Value {
    let name = state.args.model_name();
    json!({
        "id": name,
        "object": "model",
        "created": now_secs(),
        "owned_by": "sglang",
        "root": name,
        "max_model_len": state.args.effective_context_length(),
    })
}
