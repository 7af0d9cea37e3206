//! `POST|PUT /generate`: single and batch `text`/`input_ids`, `sampling_params`
//! (incl. `n`), `rid`, `return_logprob`, `routed_dp_rank`, and cumulative SSE streaming
//! (`data: {...}\n\n` per decode step, then `data: [DONE]\n\n`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::StatusCode;
use serde::Deserialize;
use serde_json::{json, Value};

use super::meta::{meta_info, output_text, MetaArgs};
use super::parse::{self, ItemInfo, OneOrMany, Prompt, SamplingParams};
use super::respond::{
    native_error, ok, sse, sse_error, sse_event, status_of, Resp, SseBody, SseFormatter,
};
use crate::mock::engine::{Done, Reply};
use crate::mock::state::MockState;
use crate::mock::tokenizer;

#[derive(Deserialize)]
struct GenerateBody {
    text: Option<OneOrMany<String>>,
    input_ids: Option<IdsInput>,
    input_embeds: Option<Value>,
    sampling_params: Option<OneOrMany<SamplingParams>>,
    stream: Option<bool>,
    rid: Option<OneOrMany<String>>,
    return_logprob: Option<OneOrMany<bool>>,
    routed_dp_rank: Option<Value>,
    data_parallel_rank: Option<Value>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum IdsInput {
    One(Vec<i64>),
    Many(Vec<Vec<i64>>),
}

/// Per-item settings the response side needs.
struct Item {
    info: ItemInfo,
    return_logprob: bool,
}

/// Handles `/generate`.
pub async fn generate(state: &Arc<MockState>, bytes: &[u8]) -> Resp {
    let start = Instant::now();
    let b: GenerateBody = match parse::body(bytes) {
        Ok(b) => b,
        Err(m) => return native_error(StatusCode::BAD_REQUEST, m),
    };
    let prepared = match prepare(state, b, bytes) {
        Ok(p) => p,
        Err(m) => return native_error(StatusCode::BAD_REQUEST, m),
    };
    if state.hooks.take_failure("/generate") {
        return native_error(StatusCode::INTERNAL_SERVER_ERROR, "mock: injected failure");
    }
    let Prepared {
        job,
        logprob_flags,
        batch,
        stream,
    } = prepared;
    let items: Vec<Item> = job
        .items
        .into_iter()
        .zip(logprob_flags)
        .map(|(info, return_logprob)| Item {
            info,
            return_logprob,
        })
        .collect();
    let mut rx = match crate::mock::pd::dispatch::dispatch(state, bytes, job.reqs, job.rx) {
        Ok(rx) => rx,
        Err(m) => return native_error(StatusCode::BAD_REQUEST, m),
    };
    if stream {
        let fmt = GenerateSse {
            state: state.clone(),
            start,
            batch,
            remaining: items.len(),
            items: items
                .into_iter()
                .map(|i| (i, Vec::new(), Vec::new()))
                .collect(),
        };
        return sse(SseBody::new(rx, Box::new(fmt), Vec::new()));
    }
    let mut done: Vec<Option<Box<Done>>> = (0..items.len()).map(|_| None).collect();
    let mut left = items.len();
    while left > 0 {
        match rx.recv().await {
            Some(Reply::Done(d)) => {
                let i = d.index as usize;
                if i < done.len() {
                    done[i] = Some(d);
                    left -= 1;
                }
            }
            Some(Reply::Step { .. }) => {}
            Some(Reply::Failed { status, message }) => {
                return native_error(status_of(status), message)
            }
            None => return native_error(StatusCode::INTERNAL_SERVER_ERROR, "engine stopped"),
        }
    }
    let e2e = start.elapsed().as_secs_f64();
    state.metrics.observe_e2e(e2e);
    let multi = state.ranks.len() > 1;
    let outs: Vec<Value> = items
        .iter()
        .zip(done.into_iter().flatten())
        .map(|(it, d)| final_object(it, &d, e2e, multi, None))
        .collect();
    if batch {
        ok(&Value::Array(outs))
    } else {
        ok(outs.first().unwrap_or(&Value::Null))
    }
}

struct Prepared {
    job: parse::Job,
    logprob_flags: Vec<bool>,
    batch: bool,
    stream: bool,
}

fn prepare(state: &MockState, b: GenerateBody, bytes: &[u8]) -> Result<Prepared, String> {
    let vocab = state.args.vocab_size;
    let given = usize::from(b.text.is_some())
        + usize::from(b.input_ids.is_some())
        + usize::from(b.input_embeds.is_some());
    if given != 1 {
        return Err("Either text, input_ids or input_embeds should be provided.".into());
    }
    if b.input_embeds.is_some() {
        return Err("input_embeds is not supported by this server.".into());
    }
    let (inputs, mut batch): (Vec<Vec<u32>>, bool) = match (b.text, b.input_ids) {
        (Some(OneOrMany::One(t)), _) => (vec![text_ids(&t, vocab)?], false),
        (Some(OneOrMany::Many(ts)), _) => (
            ts.iter()
                .map(|t| text_ids(t, vocab))
                .collect::<Result<_, _>>()?,
            true,
        ),
        (None, Some(IdsInput::One(ids))) => (vec![parse::token_ids(&ids, vocab)?], false),
        (None, Some(IdsInput::Many(all))) => (
            all.iter()
                .map(|ids| parse::token_ids(ids, vocab))
                .collect::<Result<_, _>>()?,
            true,
        ),
        (None, None) => {
            return Err("Either text, input_ids or input_embeds should be provided.".into())
        }
    };
    if batch && inputs.is_empty() {
        return Err("The batch is empty.".into());
    }
    let count = inputs.len();
    let params: Vec<SamplingParams> = match b.sampling_params {
        None => vec![SamplingParams::default(); count],
        Some(OneOrMany::One(p)) => vec![p; count],
        Some(OneOrMany::Many(ps)) if ps.len() == count => ps,
        Some(OneOrMany::Many(ps)) => {
            return Err(format!(
                "sampling_params has {} entries but the batch has {count}.",
                ps.len()
            ))
        }
    };
    let logprob: Vec<bool> = match b.return_logprob {
        None => vec![false; count],
        Some(OneOrMany::One(x)) => vec![x; count],
        Some(OneOrMany::Many(v)) if v.len() == count => v,
        Some(OneOrMany::Many(v)) => {
            return Err(format!(
                "return_logprob has {} entries but the batch has {count}.",
                v.len()
            ))
        }
    };
    let rids = parse::expand_rids(b.rid, count, batch)?;
    if !batch && params[0].n() > 1 {
        batch = true;
    }
    let rank = parse::requested_rank(
        state,
        b.routed_dp_rank.as_ref().or(b.data_parallel_rank.as_ref()),
    )?;
    let mut namespaces = super::namespace::for_call(state, bytes, count, false)?.into_iter();
    let mut flags = Vec::new();
    let mut prompts = Vec::with_capacity(count);
    for ((tokens, p), (rid, lp)) in inputs
        .into_iter()
        .zip(params)
        .zip(rids.into_iter().zip(logprob))
    {
        flags.extend(std::iter::repeat_n(lp, p.n()));
        prompts.push(Prompt {
            tokens,
            params: p,
            rid,
            ns: namespaces.next().unwrap_or_default(),
        });
    }
    let stream = b.stream.unwrap_or(false);
    let job = parse::build_job(state, prompts, stream, rank, 128)?;
    Ok(Prepared {
        job,
        logprob_flags: flags,
        batch,
        stream,
    })
}

fn text_ids(text: &str, vocab: u32) -> Result<Vec<u32>, String> {
    let ids = tokenizer::encode(text, vocab);
    if ids.is_empty() {
        return Err("The input text is empty.".into());
    }
    Ok(ids)
}

fn final_object(it: &Item, d: &Done, e2e: f64, multi_rank: bool, index: Option<usize>) -> Value {
    let meta = meta_info(&MetaArgs {
        rid: &d.rid,
        prompt_tokens: d.prompt_tokens,
        output_ids: &d.output_ids,
        logprobs: &d.logprobs,
        cached_tokens: d.cached_tokens,
        cached_split: d.cached_split,
        finish: Some(&d.finish),
        weight_version: &d.weight_version,
        dp_rank: multi_rank.then_some(d.dp_rank),
        e2e_latency: Some(e2e),
        retractions: d.retractions,
        timings: Some(d.timings()),
        return_logprob: it.return_logprob,
        input_logprobs: &d.input_logprobs,
    });
    let mut v =
        json!({"text": output_text(&d.output_ids), "output_ids": d.output_ids, "meta_info": meta});
    if let (Some(i), Some(obj)) = (index, v.as_object_mut()) {
        obj.insert("index".into(), i.into());
    }
    v
}

/// Cumulative `/generate` stream.
struct GenerateSse {
    state: Arc<MockState>,
    start: Instant,
    batch: bool,
    remaining: usize,
    /// Item, output ids so far, logprobs so far.
    items: Vec<(Item, Vec<u32>, Vec<f32>)>,
}

impl SseFormatter for GenerateSse {
    fn on_reply(&mut self, reply: Reply, out: &mut VecDeque<Bytes>) -> bool {
        let multi = self.state.ranks.len() > 1;
        match reply {
            Reply::Step {
                index,
                token,
                logprob,
                cached_tokens,
            } => {
                let Some((it, ids, lps)) = self.items.get_mut(index as usize) else {
                    return false;
                };
                ids.push(token);
                lps.push(logprob);
                let version = self.state.weight_version();
                let meta = meta_info(&MetaArgs {
                    rid: &it.info.rid,
                    prompt_tokens: it.info.prompt_tokens,
                    output_ids: ids,
                    logprobs: lps,
                    cached_tokens,
                    cached_split: None,
                    finish: None,
                    weight_version: &version,
                    dp_rank: multi.then_some(it.info.rank),
                    e2e_latency: None,
                    retractions: 0,
                    timings: None,
                    return_logprob: it.return_logprob,
                    input_logprobs: &[],
                });
                let mut v = json!({"text": output_text(ids), "output_ids": ids, "meta_info": meta});
                if self.batch {
                    if let Some(o) = v.as_object_mut() {
                        o.insert("index".into(), index.into());
                    }
                }
                out.push_back(sse_event(&v));
                false
            }
            Reply::Failed { status, message } => {
                out.push_back(sse_error(status, &message));
                true
            }
            Reply::Done(d) => {
                let i = d.index as usize;
                if let Some((it, _, _)) = self.items.get(i) {
                    let e2e = self.start.elapsed().as_secs_f64();
                    self.state.metrics.observe_e2e(e2e);
                    out.push_back(sse_event(&final_object(
                        it,
                        &d,
                        e2e,
                        multi,
                        self.batch.then_some(i),
                    )));
                    self.remaining = self.remaining.saturating_sub(1);
                }
                self.remaining == 0
            }
        }
    }
}
