//! The per-rank load PUB socket: `[b"load", seq (8 B big-endian, from 0), LoadStat]`
//! (`SchedulerLoadPublisher.publish_load_stat`), a changed reading sent at once and an
//! unchanged one re-sent as a heartbeat (`LOAD_PUBLISH_HEARTBEAT_S` = 1 s). No replay.
//!
//! SGLang calls the publisher from its scheduler loop after each batch and on every idle
//! pass; the mock's engine refreshes its rank's [`LoadView`] after each step, and this task
//! samples it every [`POLL`] (so a change goes out within one poll of the step that made
//! it). Heartbeats run on simulated time: 1 s divided by `--speedup` (1 s of wall time at
//! speedup 0). The task holds only a `Weak` to the view and ends when its rank's engine does.

use std::sync::Weak;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::time::{Instant, MissedTickBehavior};
use zeromq::{PubSocket, Socket, SocketSend, ZmqMessage};

use super::stat::LoadStat;
use crate::mock::engine::LoadView;

/// `LOAD_TOPIC`, the first frame of every message.
pub const TOPIC: &[u8] = b"load";
/// `LOAD_PUBLISH_HEARTBEAT_S`, in simulated seconds.
pub const HEARTBEAT_SECS: f64 = 1.0;
/// How often the rank's load view is sampled (wall time).
pub const POLL: Duration = Duration::from_millis(5);

/// What a rank's readings are built from besides its load view.
#[derive(Debug, Clone, Copy)]
pub struct RankConst {
    pub rank: u32,
    pub max_total_num_tokens: usize,
    pub max_running_requests: usize,
}

/// The reading SGLang's `SchedulerLoadInquirer.get_loads` would give for this view:
/// `num_tokens` = KV tokens in use, `num_total_tokens` = those plus the waiting requests'
/// tokens, `num_waiting_uncached_tokens` = waiting tokens times the recent miss rate (the
/// inquirer's estimate when the waiting queue is not prefix-matched). The mock keeps no
/// cumulative prefill counters, so the last two fields stay 0.
pub fn reading(view: &LoadView, c: RankConst) -> LoadStat {
    let s = &view.snap;
    let miss = (1.0 - s.last_hit_rate).clamp(0.0, 1.0);
    LoadStat {
        num_running_reqs: s.running as u64,
        num_waiting_reqs: s.waiting as u64,
        num_tokens: s.used_tokens as u64,
        max_total_num_tokens: c.max_total_num_tokens as u64,
        attn_dp_rank: u64::from(c.rank),
        num_waiting_uncached_tokens: (s.waiting_prompt_tokens as f64 * miss) as u64,
        num_total_tokens: (s.used_tokens + s.waiting_prompt_tokens) as u64,
        max_running_requests: c.max_running_requests as u64,
        total_prefill_uncached_tokens: 0,
        total_prefill_busy_us: 0,
    }
}

/// The heartbeat period for `--speedup`.
pub fn heartbeat(speedup: f64) -> Duration {
    if speedup > 0.0 && speedup.is_finite() {
        Duration::from_secs_f64(HEARTBEAT_SECS / speedup).max(POLL)
    } else {
        Duration::from_secs_f64(HEARTBEAT_SECS)
    }
}

/// Runs one rank's publisher until its engine is gone.
pub async fn run(
    mut socket: PubSocket,
    view: Weak<Mutex<LoadView>>,
    c: RankConst,
    heartbeat: Duration,
) {
    let mut tick = tokio::time::interval(POLL.min(heartbeat));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut seq: u64 = 0;
    let mut last: Option<(LoadStat, Instant)> = None;
    loop {
        tick.tick().await;
        let Some(view) = view.upgrade() else { break };
        let stat = reading(&view.lock(), c);
        drop(view);
        let now = Instant::now();
        if let Some((prev, at)) = last {
            if prev == stat && now.duration_since(at) < heartbeat {
                continue;
            }
        }
        let frames = vec![
            Bytes::from_static(TOPIC),
            Bytes::copy_from_slice(&seq.to_be_bytes()),
            Bytes::from(stat.encode()),
        ];
        if let Ok(msg) = ZmqMessage::try_from(frames) {
            // PUB drops for absent or slow subscribers; a lost reading is superseded.
            if let Err(e) = socket.send(msg).await {
                tracing::debug!("load publish failed: {e}");
            }
        }
        seq += 1;
        last = Some((stat, now));
    }
    let _ = socket.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::engine::Snapshot;

    #[test]
    fn reading_maps_the_view() {
        let view = LoadView {
            snap: Snapshot {
                running: 3,
                waiting: 2,
                used_tokens: 336,
                waiting_prompt_tokens: 100,
                last_hit_rate: 0.25,
                ..Snapshot::default()
            },
            ..LoadView::default()
        };
        let c = RankConst {
            rank: 1,
            max_total_num_tokens: 65536,
            max_running_requests: 256,
        };
        let s = reading(&view, c);
        assert_eq!(
            s.fields(),
            [3, 2, 336, 65536, 1, 75, 436, 256, 0, 0],
            "{s:?}"
        );
    }

    #[test]
    fn heartbeat_is_simulated_time() {
        assert_eq!(heartbeat(1.0), Duration::from_secs(1));
        assert_eq!(heartbeat(10.0), Duration::from_millis(100));
        assert_eq!(heartbeat(0.0), Duration::from_secs(1));
        assert_eq!(heartbeat(1e9), POLL);
    }
}
