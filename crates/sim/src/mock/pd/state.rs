//! The worker's PD role and the process's PD state: rooms, link, timeouts, the bootstrap
//! listener of a prefill, the decode's bootstrap client, the gauges; the PD flags' checks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio_util::task::TaskTracker;

use super::gauges::Gauges;
use super::rooms::Rooms;
use super::transfer::Link;
use super::{bootstrap, client};
use crate::mock::config::MockArgs;

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
    pub bootstrap_timeout: Timeout,
    pub waiting_timeout: Timeout,
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

    /// A fresh id for a prefill request whose KV is held through its transfer.
    pub fn next_hold_id(&self) -> u64 {
        self.next_hold.fetch_add(1, Ordering::Relaxed)
    }

    /// `/v1/loads`' `disaggregation` section of `rank`.
    pub fn load_section(&self, rank: usize) -> serde_json::Value {
        self.gauges(rank).section(self.mode.as_str())
    }
}

/// A PD timeout: SGLang's timeouts run on the engine's clock, which the mock compresses by
/// `--speedup` like every simulated duration (a 300 s bootstrap timeout waits 30 s of wall
/// time at speedup 10, which the clients' simulated clock reads as 300 s); with speedup 0 (no
/// simulated time) the flag is wall seconds.
#[derive(Debug, Clone, Copy)]
pub struct Timeout {
    /// As configured, in the engine's (simulated) seconds: what failure messages report.
    pub secs: f64,
    /// How long the mock waits.
    pub wall: Duration,
}

impl Timeout {
    /// `secs` of simulated time at `speedup`.
    pub fn new(secs: f64, speedup: f64) -> Timeout {
        let wall = if speedup > 0.0 { secs / speedup } else { secs };
        Timeout {
            secs,
            wall: Duration::from_secs_f64(wall),
        }
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
        bootstrap_timeout: Timeout::new(a.disaggregation_bootstrap_timeout, a.speedup),
        waiting_timeout: Timeout::new(a.disaggregation_waiting_timeout, a.speedup),
        tasks,
        next_hold: AtomicU64::new(0),
        client,
        gauges: (0..a.dp_size.max(1)).map(|_| Arc::default()).collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_run_on_the_simulated_clock() {
        let t = Timeout::new(300.0, 10.0);
        assert_eq!((t.secs, t.wall), (300.0, Duration::from_secs(30)));
        // Slow motion stretches it; speedup 0 (no simulated time) takes the flag as wall time.
        assert_eq!(Timeout::new(1.0, 0.5).wall, Duration::from_secs(2));
        assert_eq!(Timeout::new(0.2, 0.0).wall, Duration::from_millis(200));
    }
}
