//! SGLang's `meta_info` object and the stand-in detokenization of outputs.

use serde_json::{json, Map, Value};

use crate::mock::engine::FinishReason;
use crate::mock::tokenizer;

/// The fields `meta_info` is built from (partial while streaming).
pub struct MetaArgs<'a> {
    pub rid: &'a str,
    pub prompt_tokens: usize,
    pub output_ids: &'a [u32],
    pub logprobs: &'a [f32],
    pub cached_tokens: usize,
    /// `(device, host)` split of the cached prefix when known (final objects).
    pub cached_split: Option<(usize, usize)>,
    pub finish: Option<&'a FinishReason>,
    pub weight_version: &'a str,
    /// `None` renders `null` (single-rank servers).
    pub dp_rank: Option<u32>,
    /// Present on the final object only.
    pub e2e_latency: Option<f64>,
    /// `total_retractions`.
    pub retractions: u32,
    /// `queue_time`, `prefill_launch_delay`, `prefill_launch_latency` (final object only;
    /// SGLang adds them when metrics are enabled, as the mock's always are).
    pub timings: Option<[f64; 3]>,
    pub return_logprob: bool,
    /// `input_token_logprobs` (`[logprob|null, token]`; a PD prefill's prompt, else empty).
    pub input_logprobs: &'a [(Option<f32>, u32)],
}

/// Builds `meta_info` as `TokenizerManager._handle_batch_output` does.
pub fn meta_info(a: &MetaArgs) -> Value {
    let mut m = Map::with_capacity(16);
    m.insert("id".into(), a.rid.into());
    m.insert(
        "finish_reason".into(),
        a.finish.map_or(Value::Null, FinishReason::to_json),
    );
    m.insert("prompt_tokens".into(), a.prompt_tokens.into());
    m.insert("weight_version".into(), a.weight_version.into());
    m.insert("total_retractions".into(), a.retractions.into());
    if let Some([queue, delay, latency]) = a.timings {
        m.insert("queue_time".into(), queue.into());
        m.insert("prefill_launch_delay".into(), delay.into());
        m.insert("prefill_launch_latency".into(), latency.into());
    }
    m.insert("completion_tokens".into(), a.output_ids.len().into());
    m.insert("cached_tokens".into(), a.cached_tokens.into());
    m.insert("cached_tokens_details".into(), cached_details(a));
    m.insert("dp_rank".into(), a.dp_rank.map_or(Value::Null, Value::from));
    if a.return_logprob {
        let lps: Vec<Value> = a
            .output_ids
            .iter()
            .zip(a.logprobs)
            .map(|(t, lp)| json!([lp, t, null]))
            .collect();
        let input: Vec<Value> = a
            .input_logprobs
            .iter()
            .map(|(lp, t)| json!([lp, t, null]))
            .collect();
        m.insert("input_token_logprobs".into(), Value::Array(input));
        m.insert("output_token_logprobs".into(), Value::Array(lps));
        m.insert(
            "output_token_logprobs_length".into(),
            a.output_ids.len().into(),
        );
    }
    if let Some(e) = a.e2e_latency {
        m.insert("e2e_latency".into(), e.into());
    }
    Value::Object(m)
}

/// `OutputStreamer.get_cached_tokens_details`: `{"device", "host"}` from the first
/// admission's split, `{"device": cached_tokens, "host": 0}` when only the total is known,
/// null when nothing was cached.
fn cached_details(a: &MetaArgs) -> Value {
    match a.cached_split {
        Some((device, host)) if device > 0 || host > 0 => json!({"device": device, "host": host}),
        _ if a.cached_tokens > 0 => json!({"device": a.cached_tokens, "host": 0}),
        _ => Value::Null,
    }
}

/// The stand-in text of generated ids.
pub fn output_text(ids: &[u32]) -> String {
    let mut s = String::with_capacity(ids.len() * 7);
    tokenizer::decode_into(ids, &mut s);
    s
}
