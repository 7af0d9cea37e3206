//! The prefill role (SGLang `disaggregation/prefill.py`). Each request of a call takes its
//! room (`rooms.rs`) on arrival and runs on the rank's radix cache with `max_new_tokens`
//! forced to 1 (`PrefillBootstrapQueue._process_req`), publishing KV events as usual; the
//! prefill may run before its decode peer has registered (SGLang 0.5.23's optimistic prefill,
//! `can_prefill_before_bootstrap`, parking the request as `pending_bootstrap`). When the
//! engine finishes it, a relay task holds the answer until the decode peer of the room is
//! there (bounded by the bootstrap timeout from arrival, `_check_bootstrap_timeout` in
//! `common/conn.py`), simulates the transfer of the pages the decode lacks, hands the first
//! token to the decode, and only then answers with `finish_reason` `length` 0
//! (`process_disagg_prefill_inflight_queue`). A bootstrap failure is a 500 with SGLang's
//! `handle_bootstrap_failure` message. The relay ends when the client goes away; its room
//! tickets are dropped then, which frees the rooms and fails a waiting decode.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::gauges::Queue;
use super::rooms::{PrefillTicket, Transferred};
use super::state::PdState;
use crate::mock::engine::{Command, Done, EngineRequest, FinishReason, Reply};

/// One request of a prefill call: its room ticket and its held KV (`None` for the fake
/// transfer).
pub(super) struct Leg {
    pub index: u32,
    pub rank: usize,
    pub ticket: Option<PrefillTicket>,
    pub kv: Option<HeldKv>,
}

/// A finished prefill request's KV, locked on its rank until this guard is dropped (after
/// the transfer, on failure, or when the client goes away): SGLang keeps it through the
/// transfer and releases it on `KVPoll.Success` (`release_kv_cache` in
/// `process_disagg_prefill_inflight_queue`).
pub(super) struct HeldKv {
    pub inbox: mpsc::UnboundedSender<Command>,
    pub id: u64,
}

impl Drop for HeldKv {
    fn drop(&mut self) {
        let _ = self.inbox.send(Command::ReleaseHeld(self.id));
    }
}

/// Pseudo-random input logprobs of a prompt (`[null, t0]`, then `[lp, t]`): SGLang returns
/// the prompt's logprobs from the prefill (`input_token_logprobs`), which PD routers prepend
/// to the decode's.
pub fn input_logprobs(prompt: &[u32], seed: u64) -> Vec<(Option<f32>, u32)> {
    prompt
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let lp = (i > 0).then(|| {
                let h = xxh3_64_with_seed(
                    &[i as u64, u64::from(t)].map(u64::to_le_bytes).concat(),
                    seed,
                );
                -((h % 4000) as f32) / 1000.0
            });
            (lp, t)
        })
        .collect()
}

/// Starts the relay of a prefill call: rewires the engine replies through it and returns the
/// requests to submit.
pub(super) fn launch(
    pd: &Arc<PdState>,
    mut reqs: Vec<(usize, EngineRequest)>,
    legs: Vec<Leg>,
    seed: u64,
) -> Vec<(usize, EngineRequest)> {
    let Some(out) = reqs.first().map(|(_, r)| r.reply.clone()) else {
        return reqs;
    };
    let (engine_tx, engine_rx) = mpsc::unbounded_channel();
    let mut prompts = HashMap::with_capacity(reqs.len());
    for (_, r) in &mut reqs {
        r.reply = engine_tx.clone();
        r.max_new_tokens = 1;
        prompts.insert(r.index, r.prompt.clone());
    }
    drop(engine_tx);
    let arrival = reqs.first().map_or_else(Instant::now, |(_, r)| r.arrival);
    let relay = Relay {
        pd: pd.clone(),
        legs: legs.into_iter().map(|l| (l.index, l)).collect(),
        prompts,
        deadline: arrival + pd.bootstrap_timeout.wall,
        seed,
    };
    pd.tasks.spawn(relay.run(engine_rx, out));
    reqs
}

struct Relay {
    pd: Arc<PdState>,
    legs: HashMap<u32, Leg>,
    prompts: HashMap<u32, Vec<u32>>,
    deadline: Instant,
    seed: u64,
}

impl Relay {
    async fn run(
        mut self,
        mut engine: mpsc::UnboundedReceiver<Reply>,
        out: mpsc::UnboundedSender<Reply>,
    ) {
        // Requests waiting for their peer, counted in the bootstrap queue until they leave it.
        let mut waiting = HashMap::new();
        for leg in self.legs.values() {
            waiting.insert(
                leg.index,
                self.pd.gauges(leg.rank).hold(Queue::PrefillBootstrap),
            );
        }
        let mut pending = FuturesUnordered::new();
        let mut engine_open = true;
        loop {
            if !engine_open && pending.is_empty() {
                return;
            }
            tokio::select! {
                _ = out.closed() => return,
                r = engine.recv(), if engine_open => match r {
                    Some(Reply::Done(mut d)) => {
                        let leg = self.legs.remove(&d.index);
                        let held = waiting.remove(&d.index);
                        if matches!(d.finish, FinishReason::Abort(_)) || d.output_ids.is_empty() {
                            // Aborted: nothing to send; the ticket's drop fails the decode.
                            drop((leg, held));
                            if out.send(Reply::Done(d)).is_err() {
                                return;
                            }
                            continue;
                        }
                        if let Some(p) = self.prompts.remove(&d.index) {
                            d.input_logprobs = input_logprobs(&p, self.seed);
                        }
                        pending.push(finish(self.pd.clone(), d, leg, held, self.deadline));
                    }
                    Some(other) => {
                        if out.send(other).is_err() {
                            return;
                        }
                    }
                    None => engine_open = false,
                },
                Some(r) = pending.next(), if !pending.is_empty() => {
                    let msg = match r {
                        Ok(d) => Reply::Done(d),
                        Err(message) => Reply::Failed { status: 500, message },
                    };
                    let failed = matches!(msg, Reply::Failed { .. });
                    if out.send(msg).is_err() || failed {
                        return;
                    }
                }
            }
        }
    }
}

/// Waits for the decode peer, transfers, and marks the request finished as SGLang's prefill
/// does (`FINISH_LENGTH(length=0)`).
async fn finish(
    pd: Arc<PdState>,
    mut d: Box<Done>,
    leg: Option<Leg>,
    held: Option<super::gauges::Held>,
    deadline: Instant,
) -> Result<Box<Done>, String> {
    let Some(leg) = leg else {
        return Err(format!("no room for request {}", d.rid));
    };
    let Some(&token) = d.output_ids.first() else {
        return Err(format!("request {} produced no token", d.rid));
    };
    let first = (token, d.logprobs.first().copied().unwrap_or(0.0));
    if let Some(mut ticket) = leg.ticket {
        let room = ticket.room();
        let failure = |e: &str| {
            format!(
                "Prefill bootstrap failed for request rank={} req.rid='{}' req.bootstrap_room={room} \
                 with exception {e}",
                d.dp_rank, d.rid
            )
        };
        let Some(peer) = ticket.peer(deadline).await else {
            let waited = pd.bootstrap_timeout.secs;
            tracing::warn!(room, rid = %d.rid, "prefill bootstrap timeout: no decode registered");
            return Err(failure(&format!(
                "Request {room} timed out after {waited:.1}s in KVPoll.Bootstrapping"
            )));
        };
        drop(held);
        if let Some(want) = peer.prefill_dp_rank {
            if want != d.dp_rank {
                let msg = format!(
                    "the decode expects prefill DP rank {want}, the room is on rank {}",
                    d.dp_rank
                );
                let _ = peer.reply.send(Err(msg.clone()));
                return Err(failure(&msg));
            }
        }
        let _inflight = pd.gauges(leg.rank).hold(Queue::PrefillInflight);
        let tokens = pd.link.tokens(d.prompt_tokens, peer.prefix_len);
        tokio::time::sleep(pd.link.wall(tokens)).await;
        pd.gauges(leg.rank).transfer_done(
            tokens as f64 * pd.kv_bytes_per_token as f64,
            pd.link.model_secs(tokens),
        );
        let _ = peer.reply.send(Ok(Transferred {
            first_token: first.0,
            logprob: first.1,
            tokens,
            cached_tokens: d.cached_tokens,
        }));
    }
    // The transfer is over (or there was none): the prefill's KV is unlocked.
    drop(leg.kv);
    d.finish = FinishReason::Length(0);
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_logprobs_shape() {
        let lps = input_logprobs(&[5, 6, 7], 0);
        assert_eq!(lps.len(), 3);
        assert_eq!(lps[0], (None, 5));
        assert!(lps[1].0.is_some_and(|l| l <= 0.0) && lps[2].1 == 7);
        assert_eq!(lps, input_logprobs(&[5, 6, 7], 0));
    }
}
