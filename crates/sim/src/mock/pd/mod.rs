//! PD disaggregation roles of the mock (SGLang `--disaggregation-mode null|prefill|decode`,
//! `python/sglang/srt/disaggregation/`). See docs/mock.md "PD disaggregation".
//!
//! Layout: `fields` (the request's bootstrap fields and SGLang's 400), `rooms` (the prefill's
//! room rendezvous), `bootstrap` (the prefill's bootstrap listener), `client` (the decode's
//! registration), `transfer` (the link model), `prefill` / `decode` (the two roles' request
//! paths), `gauges` (`/v1/loads` disaggregation section). The generation routes call
//! [`dispatch`] instead of submitting their requests directly.

pub mod bootstrap;
pub mod client;
mod decode;
pub mod fields;
pub mod gauges;
pub mod prefill;
pub mod rooms;
pub mod transfer;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use crate::mock::config::MockArgs;
use crate::mock::engine::{EngineRequest, Reply};
use crate::mock::http::parse;
use crate::mock::state::MockState;
use fields::PdFields;
use gauges::Gauges;
use rooms::Rooms;
use transfer::Link;

/// The worker's role (`--disaggregation-mode`, SGLang's `DisaggregationMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Null,
    Prefill,
    Decode,
}

impl Mode {
    /// From the flag value (validated by clap).
    pub fn parse(s: &str) -> Mode {
        match s {
            "prefill" => Mode::Prefill,
            "decode" => Mode::Decode,
            _ => Mode::Null,
        }
    }

    /// SGLang's name (`/server_info.disaggregation_mode`, `/v1/loads` `mode`).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Null => "null",
            Mode::Prefill => "prefill",
            Mode::Decode => "decode",
        }
    }
}

/// The PD state of one process.
#[derive(Debug)]
pub struct PdState {
    pub mode: Mode,
    /// The prefill's bound bootstrap port; the configured one for other roles (a decode
    /// uses it for requests whose `bootstrap_port` is null).
    pub bootstrap_port: u16,
    /// `--disaggregation-decode-enable-radix-cache` (decode role only).
    pub decode_radix: bool,
    pub rooms: Arc<Rooms>,
    pub link: Link,
    pub kv_bytes_per_token: u64,
    pub bootstrap_timeout: Duration,
    pub waiting_timeout: Duration,
    /// Every PD task: bootstrap connections, prefill relays, decode legs.
    pub tasks: TaskTracker,
    /// Ids of prefill requests whose KV is held through the transfer.
    next_hold: AtomicU64,
    /// The decode's pooled client for prefill bootstrap listeners.
    pub client: client::BootstrapClient,
    gauges: Vec<Arc<Gauges>>,
}

impl PdState {
    /// The gauges of `rank` (rank 0's for an out-of-range rank).
    pub fn gauges(&self, rank: usize) -> Arc<Gauges> {
        self.gauges
            .get(rank)
            .or_else(|| self.gauges.first())
            .cloned()
            .unwrap_or_default()
    }

    /// `/v1/loads`' `disaggregation` section of `rank`.
    pub fn load_section(&self, rank: usize) -> serde_json::Value {
        self.gauges(rank).section(self.mode.as_str())
    }
}

/// Checks the PD flags.
pub fn validate_args(a: &MockArgs) -> Result<(), String> {
    let secs = |v: f64, flag: &str| {
        if v.is_finite() && v >= 0.0 {
            Ok(())
        } else {
            Err(format!("{flag} must be a number of seconds >= 0"))
        }
    };
    secs(
        a.disaggregation_bootstrap_timeout,
        "--disaggregation-bootstrap-timeout",
    )?;
    secs(
        a.disaggregation_waiting_timeout,
        "--disaggregation-waiting-timeout",
    )?;
    if !(a.disaggregation_link_gbps.is_finite() && a.disaggregation_link_gbps > 0.0) {
        return Err("--disaggregation-link-gbps must be a positive number".into());
    }
    if a.disaggregation_decode_enable_radix_cache && a.disaggregation_mode != "decode" {
        tracing::warn!(
            "--disaggregation-decode-enable-radix-cache only applies to the decode role"
        );
    }
    Ok(())
}

/// Builds the PD state; in the prefill role binds the bootstrap listener on
/// `--host:--disaggregation-bootstrap-port` and starts serving it.
pub async fn start(a: &MockArgs) -> anyhow::Result<Arc<PdState>> {
    let mode = Mode::parse(&a.disaggregation_mode);
    let rooms = Arc::new(Rooms::default());
    let tasks = TaskTracker::new();
    let mut port = a.disaggregation_bootstrap_port;
    if mode == Mode::Prefill {
        // SGLang's listen backlog, as the HTTP listener (`mock/mod.rs`): a GRPO burst opens
        // one registration per request at once.
        let listener =
            kvrouter::server::connections::bind_with_backlog((a.host.as_str(), port), 2048)
                .await
                .with_context(|| format!("bind bootstrap port {}:{port}", a.host))?;
        port = listener.local_addr()?.port();
        tasks.spawn(bootstrap::serve(listener, rooms.clone(), tasks.clone()));
    }
    let client = client::BootstrapClient::new(&tasks);
    Ok(Arc::new(PdState {
        mode,
        bootstrap_port: port,
        decode_radix: mode == Mode::Decode && a.disaggregation_decode_enable_radix_cache,
        rooms,
        link: Link::from_args(a),
        kv_bytes_per_token: a.disaggregation_kv_bytes_per_token,
        bootstrap_timeout: Duration::from_secs_f64(a.disaggregation_bootstrap_timeout),
        waiting_timeout: Duration::from_secs_f64(a.disaggregation_waiting_timeout),
        tasks,
        next_hold: AtomicU64::new(0),
        client,
        gauges: (0..a.dp_size.max(1)).map(|_| Arc::default()).collect(),
    }))
}

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
                    let id = pd.next_hold.fetch_add(1, Ordering::Relaxed);
                    r.hold = Some(id);
                    let inbox = state.ranks.get(*rank).map(|h| h.inbox.clone());
                    let kv = inbox.map(|inbox| prefill::HeldKv { inbox, id });
                    (Some(ticket), kv)
                };
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
