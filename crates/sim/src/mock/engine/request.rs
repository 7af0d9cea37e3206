//! What the HTTP layer hands to a rank's scheduler and what it gets back.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::mock::cache::Namespace;
use crate::mock::sampler::Sampler;

/// Why a request finished (SGLang's `finish_reason`).
#[derive(Debug, Clone, PartialEq)]
pub enum FinishReason {
    /// Hit `max_new_tokens`.
    Length(usize),
    /// Generated a stop token id.
    Stop(u32),
    /// Aborted (by `/abort_request`, pause, or a capacity error).
    Abort(String),
}

impl FinishReason {
    /// SGLang's `meta_info.finish_reason` object.
    pub fn to_json(&self) -> Value {
        match self {
            FinishReason::Length(n) => json!({"type": "length", "length": n}),
            FinishReason::Stop(t) => json!({"type": "stop", "matched": t}),
            FinishReason::Abort(m) => json!({"type": "abort", "message": m}),
        }
    }

    /// The OpenAI `finish_reason` string.
    pub fn openai(&self) -> &'static str {
        match self {
            FinishReason::Length(_) => "length",
            FinishReason::Stop(_) => "stop",
            FinishReason::Abort(_) => "abort",
        }
    }

    /// OpenAI `matched_stop` extension.
    pub fn matched_stop(&self) -> Value {
        match self {
            FinishReason::Stop(t) => json!(t),
            _ => Value::Null,
        }
    }
}

/// One generation request as the scheduler sees it.
#[derive(Debug)]
pub struct EngineRequest {
    pub rid: String,
    /// Position within the HTTP call (batch item x sample).
    pub index: u32,
    pub prompt: Vec<u32>,
    pub max_new_tokens: usize,
    pub stop_token_ids: Vec<u32>,
    pub ignore_eos: bool,
    pub stream: bool,
    pub sampler: Sampler,
    pub reply: mpsc::UnboundedSender<Reply>,
    pub arrival: Instant,
    /// Cache namespace (`extra_key` + LoRA id, `cache_salt`); default = the plain tree.
    pub ns: Namespace,
    /// PD decode: the prompt's KV arrived from a prefill worker (`crate::mock::pd`).
    pub prebuilt: Option<Prebuilt>,
    /// PD prefill: at finish the request's KV stays locked under this id until the rank gets
    /// `Command::ReleaseHeld` (SGLang keeps it through the transfer,
    /// `disagg_prefill_inflight_queue`, `disaggregation/prefill.py`).
    pub hold: Option<u64>,
}

/// A PD decode request whose prompt KV was transferred (SGLang's decode
/// `prepare_for_prebuilt`, `disaggregation/decode_schedule_batch_mixin.py`): admission
/// allocates its pages but computes nothing, and its first output token is the one the
/// prefill sampled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prebuilt {
    /// The first output token and its logprob, as the prefill sampled them.
    pub first: (u32, f32),
    /// `--disaggregation-decode-enable-radix-cache`: match and insert into the rank's tree;
    /// without it the decode runs SGLang's `disable_radix_cache` (no match, no insert).
    pub radix: bool,
    /// The prefill's reported prefix hit: the decode's `cached_tokens` starts from it and adds
    /// only its own reuse beyond it (`prepare_for_prebuilt`,
    /// `disaggregation/decode_schedule_batch_mixin.py`).
    pub cached: usize,
}

/// A message from the scheduler to the HTTP task that owns the request.
#[derive(Debug)]
pub enum Reply {
    /// One generated token (streaming requests only).
    Step {
        index: u32,
        token: u32,
        logprob: f32,
        cached_tokens: usize,
    },
    /// The request finished.
    Done(Box<Done>),
    /// The whole call failed (PD bootstrap or transfer failure): the route answers
    /// `status` with `message` in its error shape, or an SSE error event when streaming.
    Failed { status: u16, message: String },
}

/// Final state of a request.
#[derive(Debug)]
pub struct Done {
    pub index: u32,
    pub rid: String,
    pub output_ids: Vec<u32>,
    pub logprobs: Vec<f32>,
    pub finish: FinishReason,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    /// `(device, host)` split of the first admission's cached prefix
    /// (`cached_tokens_details`), `None` when the request was never admitted.
    pub cached_split: Option<(usize, usize)>,
    pub weight_version: Arc<str>,
    pub dp_rank: u32,
    /// Seconds from arrival to the first token (None when no token was generated).
    pub ttft: Option<f64>,
    /// Seconds from the last entry into the waiting queue to the admission that followed
    /// (SGLang `meta_info.queue_time`).
    pub queue_time: f64,
    /// Simulated milliseconds of the prefill pass that completed the prompt.
    pub prefill_ms: f64,
    /// `prefill_ms` in wall seconds (`/ --speedup`; 0 with speedup 0), set by the rank driver.
    pub prefill_secs: f64,
    /// Times the request was retracted (SGLang `meta_info.total_retractions`).
    pub retractions: u32,
    /// `meta_info.input_token_logprobs` entries (`[logprob|null, token]`): set by a PD
    /// prefill with `return_logprob`, empty otherwise.
    pub input_logprobs: Vec<(Option<f32>, u32)>,
}

impl Done {
    /// SGLang's per-request timings (`queue_time`, `prefill_launch_delay`,
    /// `prefill_launch_latency`, seconds): the mock launches a batch when it is formed.
    pub fn timings(&self) -> [f64; 3] {
        [self.queue_time, 0.0, self.prefill_secs]
    }
}
