//! Request parsing shared by the generation routes: sampling parameters with SGLang's
//! validation, token-id checks, rid expansion, DP-rank selection and submission.

use std::time::Instant;

use serde::Deserialize;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::mock::engine::{Command, EngineRequest, Reply};
use crate::mock::sampler::Sampler;
use crate::mock::state::MockState;

/// One value or a list of them (SGLang accepts both for most batchable fields).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

/// The `sampling_params` keys the mock acts on (others are accepted and ignored).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    pub max_new_tokens: Option<i64>,
    pub min_new_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub ignore_eos: Option<bool>,
    pub stop_token_ids: Option<Vec<i64>>,
    pub n: Option<i64>,
    pub sampling_seed: Option<u64>,
}

impl SamplingParams {
    /// SGLang's `SamplingParams.verify` subset.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(t) = self.temperature {
            if t < 0.0 {
                return Err(format!("temperature must be non-negative, got {t}."));
            }
        }
        if let Some(p) = self.top_p {
            if !(p > 0.0 && p <= 1.0) {
                return Err(format!("top_p must be in (0, 1], got {p}."));
            }
        }
        if let Some(k) = self.top_k {
            if k < -1 || k == 0 {
                return Err(format!(
                    "top_k must be -1 (disable), or at least 1, got {k}."
                ));
            }
        }
        if let Some(p) = self.min_p {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("min_p must be in [0, 1], got {p}."));
            }
        }
        if let Some(m) = self.max_new_tokens {
            if m < 0 {
                return Err(format!("max_new_tokens must be at least 0, got {m}."));
            }
        }
        if let (Some(min), Some(max)) = (self.min_new_tokens, self.max_new_tokens) {
            if min < 0 || min > max {
                return Err(format!(
                    "min_new_tokens must be in [0, max_new_tokens], got {min}."
                ));
            }
        }
        if let Some(n) = self.n {
            if n < 1 {
                return Err(format!("n must be at least 1, got {n}."));
            }
        }
        Ok(())
    }

    /// Number of parallel samples.
    pub fn n(&self) -> usize {
        self.n.unwrap_or(1).max(1) as usize
    }
}

/// Deserializes a JSON body, naming the problem on failure.
pub fn body<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, String> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err("request body is empty; expected a JSON object".into());
    }
    serde_json::from_slice(bytes).map_err(|e| format!("invalid request body: {e}"))
}

/// Converts JSON token ids, checking range against the vocabulary.
pub fn token_ids(ids: &[i64], vocab: u32) -> Result<Vec<u32>, String> {
    if ids.is_empty() {
        return Err("The input_ids is empty.".into());
    }
    ids.iter()
        .map(|&t| {
            if t < 0 || t >= i64::from(vocab) {
                Err(format!(
                    "Token id {t} is out of vocabulary (vocab size {vocab})."
                ))
            } else {
                Ok(t as u32)
            }
        })
        .collect()
}

/// The rank requested by `routed_dp_rank` / `data_parallel_rank`, validated.
pub fn requested_rank(state: &MockState, v: Option<&Value>) -> Result<Option<usize>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(x) => match x.as_i64() {
            Some(r) if r >= 0 && (r as usize) < state.ranks.len() => Ok(Some(r as usize)),
            _ => Err(format!(
                "routed_dp_rank {x} is out of range [0, {}).",
                state.ranks.len()
            )),
        },
    }
}

/// One prompt to generate for, before expansion by `n`.
pub struct Prompt {
    pub tokens: Vec<u32>,
    pub params: SamplingParams,
    /// Explicit rid of this item (already expanded for batches).
    pub rid: Option<String>,
    /// Cache namespace (`namespace.rs`).
    pub ns: crate::mock::cache::Namespace,
}

/// What the HTTP side remembers of each request of a call.
#[derive(Debug, Clone)]
pub struct ItemInfo {
    pub rid: String,
    pub prompt_tokens: usize,
    pub rank: u32,
}

/// Everything about one HTTP call's generation work.
pub struct Job {
    pub reqs: Vec<(usize, EngineRequest)>,
    pub rx: mpsc::UnboundedReceiver<Reply>,
    /// rid, prompt length and DP rank per index.
    pub items: Vec<ItemInfo>,
}

/// Upper bound on batch items x `n` in one call (protects the mock's memory).
pub const MAX_REQUESTS_PER_CALL: usize = 65536;

/// Builds the engine requests of a call (prompt x n, in SGLang's index order).
pub fn build_job(
    state: &MockState,
    prompts: Vec<Prompt>,
    stream: bool,
    rank: Option<usize>,
    default_max_new: usize,
) -> Result<Job, String> {
    let (tx, rx) = mpsc::unbounded_channel();
    let ctx = state.args.effective_context_length();
    let now = Instant::now();
    let mut reqs = Vec::new();
    let mut items = Vec::new();
    for p in prompts {
        p.params.validate()?;
        let len = p.tokens.len();
        if len >= ctx {
            return Err(format!(
                "The input ({len} tokens) is longer than the model's context length ({ctx} tokens)."
            ));
        }
        let max_new = p
            .params
            .max_new_tokens
            .map_or(default_max_new, |m| m as usize)
            .min(ctx - len);
        let stop: Vec<u32> = p
            .params
            .stop_token_ids
            .iter()
            .flatten()
            .filter_map(|&t| u32::try_from(t).ok())
            .collect();
        let n = p.params.n();
        if items.len() + n > MAX_REQUESTS_PER_CALL {
            return Err(format!(
                "A call may create at most {MAX_REQUESTS_PER_CALL} requests (batch x n)."
            ));
        }
        for j in 0..n {
            let index = items.len() as u32;
            let rid = match (&p.rid, n) {
                (Some(r), 1) => r.clone(),
                (Some(r), _) => format!("{r}_{j}"),
                (None, _) => uuid::Uuid::new_v4().simple().to_string(),
            };
            let sampler = Sampler::new(
                state.args.sampling_seed(),
                &p.tokens,
                p.params.sampling_seed,
                j as u32,
                state.args.vocab_size,
            );
            let r = rank.unwrap_or_else(|| state.pick_rank());
            items.push(ItemInfo {
                rid: rid.clone(),
                prompt_tokens: len,
                rank: r as u32,
            });
            reqs.push((
                r,
                EngineRequest {
                    rid,
                    index,
                    prompt: p.tokens.clone(),
                    max_new_tokens: max_new,
                    stop_token_ids: stop.clone(),
                    ignore_eos: p.params.ignore_eos.unwrap_or(false),
                    stream,
                    sampler,
                    reply: tx.clone(),
                    arrival: now,
                    ns: p.ns.clone(),
                    prebuilt: None,
                    hold: None,
                },
            ));
        }
    }
    let mut seen = std::collections::HashSet::new();
    for it in &items {
        if !seen.insert(it.rid.as_str()) {
            return Err(format!("Duplicate rid {:?} in one batch.", it.rid));
        }
    }
    Ok(Job { reqs, rx, items })
}

/// Sends a job's requests to their ranks (one message per rank, so a batch lands in one
/// scheduler iteration).
pub fn submit(state: &MockState, reqs: Vec<(usize, EngineRequest)>) {
    if state.ranks.len() == 1 {
        let all = reqs.into_iter().map(|(_, r)| r).collect();
        let _ = state.ranks[0].inbox.send(Command::Submit(all));
        return;
    }
    let mut per_rank: Vec<Vec<EngineRequest>> =
        (0..state.ranks.len()).map(|_| Vec::new()).collect();
    for (r, req) in reqs {
        per_rank[r].push(req);
    }
    for (r, batch) in per_rank.into_iter().enumerate() {
        if !batch.is_empty() {
            let _ = state.ranks[r].inbox.send(Command::Submit(batch));
        }
    }
}

/// Expands a batch-level rid into per-item rids (`rid_i` for a single string).
pub fn expand_rids(
    rid: Option<OneOrMany<String>>,
    count: usize,
    batch: bool,
) -> Result<Vec<Option<String>>, String> {
    match rid {
        None => Ok(vec![None; count]),
        Some(OneOrMany::One(r)) if !batch => Ok(vec![Some(r)]),
        Some(OneOrMany::One(r)) => Ok((0..count).map(|i| Some(format!("{r}_{i}"))).collect()),
        Some(OneOrMany::Many(v)) if v.len() == count => Ok(v.into_iter().map(Some).collect()),
        Some(OneOrMany::Many(v)) => Err(format!(
            "rid has {} entries but the batch has {count}.",
            v.len()
        )),
    }
}
