//! The generation routes' entry to the PD roles: a call's requests submitted as the role
//! requires (checked bootstrap fields, the prefill's held KV and relay, the decode's legs).

use std::sync::Arc;

use tokio::sync::mpsc;

use super::fields::PdFields;
use super::state::Mode;
use super::{decode, prefill};
use crate::mock::engine::{EngineRequest, Reply};
use crate::mock::http::parse;
use crate::mock::state::MockState;

/// Submits a call's requests as the role requires and returns the channel its route reads.
/// In the null role this is `parse::submit`; a PD role first checks every request's
/// bootstrap fields (an `Err` is a 400 message, before anything runs).
pub fn dispatch(
    state: &Arc<MockState>,
    bytes: &[u8],
    mut reqs: Vec<(usize, EngineRequest)>,
    rx: mpsc::UnboundedReceiver<Reply>,
) -> Result<mpsc::UnboundedReceiver<Reply>, String> {
    let pd = &state.pd;
    let boots = |reqs: &[(usize, EngineRequest)]| -> Result<_, String> {
        let f = PdFields::parse(bytes)?;
        let boots = reqs
            .iter()
            .map(|(_, r)| f.request(r.index as usize, &r.rid))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((f.pinned_rank, boots))
    };
    match pd.mode {
        Mode::Null => parse::submit(state, reqs),
        Mode::Prefill => {
            let (pinned, boots) = boots(&reqs)?;
            let dp = state.ranks.len().max(1);
            let mut legs = Vec::with_capacity(reqs.len());
            for ((rank, r), b) in reqs.iter_mut().zip(&boots) {
                // `follow_bootstrap_room`: room % dp_size unless the request pins a rank
                // (`DataParallelController.follow_bootstrap_room_scheduler`).
                if !pinned {
                    *rank = (b.room % dp as u64) as usize;
                }
                let (ticket, kv) = if b.fake() {
                    (None, None)
                } else {
                    let ticket = pd.rooms.open_prefill(b.room).map_err(|e| e.to_string())?;
                    let id = pd.next_hold_id();
                    r.hold = Some(id);
                    let inbox = state.ranks.get(*rank).map(|h| h.inbox.clone());
                    let kv = inbox.map(|inbox| prefill::HeldKv { inbox, id });
                    (Some(ticket), kv)
                };
                tracing::debug!(room = b.room, rid = %r.rid, rank = *rank, "prefill leg");
                legs.push(prefill::Leg {
                    index: r.index,
                    rank: *rank,
                    ticket,
                    kv,
                });
            }
            // The relay takes the engine's replies and feeds the route's channel.
            let reqs = prefill::launch(pd, reqs, legs, state.args.sampling_seed());
            parse::submit(state, reqs);
        }
        Mode::Decode => {
            let (_, boots) = boots(&reqs)?;
            for ((_, r), b) in reqs.iter().zip(&boots) {
                tracing::debug!(room = b.room, rid = %r.rid, "decode leg");
            }
            let legs = reqs
                .into_iter()
                .zip(boots)
                .map(|((rank, req), boot)| decode::Leg { rank, req, boot })
                .collect();
            decode::launch(state, legs);
        }
    }
    Ok(rx)
}
