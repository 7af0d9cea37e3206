//! The decode role (SGLang `disaggregation/decode.py`). Each request registers for its room at
//! the prefill's bootstrap listener (`bootstrap_host:bootstrap_port`, the decode's own
//! `--disaggregation-bootstrap-port` when the port is null, as `Scheduler.handle_generate_request`
//! fills it), telling the prefill how much of the prompt it already holds (its own radix
//! match with `--disaggregation-decode-enable-radix-cache`, else 0; `decode_prefix_len`), and
//! waits for the KV (bounded by the waiting timeout, `_check_waiting_timeout` in
//! `common/conn.py`). Then the request joins the rank's scheduler as a prebuilt request: its
//! pages are allocated without computing, its first token is the prefill's, and it decodes
//! the remaining `max_new_tokens - 1` with the rank's normal batching. A failure is a 500 with
//! SGLang's "Decode transfer failed" message. The fake host completes locally at once
//! (`disaggregation/fake/conn.py`). The KV pre-allocation SGLang makes before the transfer
//! (`DecodePreallocQueue`) is not modelled: memory is taken at admission.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::bootstrap::RegisterBody;
use super::client;
use super::fields::Bootstrap;
use super::gauges::Queue;
use crate::mock::engine::{Command, EngineRequest, Prebuilt, Reply};
use crate::mock::http::parse;
use crate::mock::state::MockState;

/// One request of a decode call.
pub(super) struct Leg {
    pub rank: usize,
    pub req: EngineRequest,
    pub boot: Bootstrap,
}

/// Submits the fake-transfer requests at once and starts a tracked task per real transfer.
pub(super) fn launch(state: &Arc<MockState>, legs: Vec<Leg>) {
    let radix = state.pd.decode_radix;
    let mut local = Vec::new();
    for mut leg in legs {
        if leg.boot.fake() {
            leg.req.prebuilt = Some(Prebuilt {
                first: leg.req.sampler.token(0),
                radix,
                cached: 0,
            });
            local.push((leg.rank, leg.req));
        } else {
            state.pd.tasks.spawn(run(state.clone(), leg));
        }
    }
    if !local.is_empty() {
        parse::submit(state, local);
    }
}

async fn prefix_len(state: &MockState, rank: usize, req: &EngineRequest) -> usize {
    let (done, rx) = oneshot::channel();
    let cmd = Command::PrefixLen {
        ns: req.ns.clone(),
        tokens: req.prompt.clone(),
        done,
    };
    if state.ranks[rank].inbox.send(cmd).is_err() {
        return 0;
    }
    rx.await.unwrap_or(0)
}

async fn run(state: Arc<MockState>, leg: Leg) {
    let Leg {
        rank,
        mut req,
        boot,
    } = leg;
    let pd = state.pd.clone();
    let out = req.reply.clone();
    let room = boot.room;
    let rid = req.rid.clone();
    let work = async {
        let _held = pd.gauges(rank).hold(Queue::DecodePrealloc);
        let prefix = if pd.decode_radix {
            prefix_len(&state, rank, &req).await
        } else {
            0
        };
        let host = boot
            .host
            .as_deref()
            .ok_or_else(|| "the request has no bootstrap_host".to_string())?;
        let authority = client::authority(host, boot.port.unwrap_or(pd.bootstrap_port));
        let body = RegisterBody {
            decode_prefix_len: prefix,
            prefill_dp_rank: boot.prefill_dp_rank,
            rid: rid.clone(),
        };
        pd.client.register(&authority, room, &body).await
    };
    let outcome = tokio::select! {
        _ = out.closed() => {
            tracing::debug!(room, rid = %rid, "decode client went away before the transfer");
            return;
        }
        r = tokio::time::timeout(pd.waiting_timeout.wall, work) => r,
    };
    let failure = |e: String| Reply::Failed {
        status: 500,
        message: format!(
            "Decode transfer failed for request rank={rank} req.rid='{rid}' \
             req.bootstrap_room={room} with exception {e}"
        ),
    };
    match outcome {
        Ok(Ok(t)) => {
            req.prebuilt = Some(Prebuilt {
                first: (t.first_token, t.logprob),
                radix: pd.decode_radix,
                cached: t.cached_tokens,
            });
            if state.ranks[rank]
                .inbox
                .send(Command::Submit(vec![req]))
                .is_err()
            {
                let _ = out.send(failure("the rank stopped".into()));
            }
        }
        Ok(Err(e)) => {
            tracing::warn!(room, rid = %rid, "decode transfer failed: {e}");
            let _ = out.send(failure(e));
        }
        Err(_) => {
            tracing::warn!(room, rid = %rid, "decode waiting timeout");
            let secs = pd.waiting_timeout.secs;
            let _ = out.send(failure(format!(
                "Request {room} timed out after {secs:.1}s in KVPoll.WaitingForInput"
            )));
        }
    }
}
