//! The async driver of one DP rank: applies control commands, runs scheduler iterations,
//! waits the simulated step time (divided by `--speedup`; never with speedup 0), then
//! delivers replies, publishes the iteration's KV events as one batch and refreshes the
//! load snapshot.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

use super::request::{EngineRequest, Reply};
use super::scheduler::{PauseMode, Scheduler, Snapshot};
use crate::mock::kv_events::PublisherHandle;
use crate::mock::metrics::MockMetrics;

/// A control or work message for one rank.
#[derive(Debug)]
pub enum Command {
    Submit(Vec<EngineRequest>),
    Abort {
        rid: Option<String>,
        all: bool,
    },
    Flush(oneshot::Sender<bool>),
    Pause(PauseMode, oneshot::Sender<()>),
    Continue(oneshot::Sender<()>),
    /// Set the weight version, optionally after draining and flushing.
    Weights(WeightUpdate),
    /// Release (`true`) or resume (`false`) memory; answers whether it was done.
    Memory {
        release: bool,
        flush_kv: bool,
        done: oneshot::Sender<bool>,
    },
    /// PD decode with a radix cache: the length of `tokens[..len-1]` resident in the tree
    /// (page-aligned), which the decode asks the prefill not to send (`decode_prefix_len`).
    PrefixLen {
        ns: crate::mock::cache::Namespace,
        tokens: Vec<u32>,
        done: oneshot::Sender<usize>,
    },
    /// PD prefill: the transfer of a held request ended; unlock and free its KV.
    ReleaseHeld(u64),
}

/// A weight change as one rank applies it.
#[derive(Debug)]
pub struct WeightUpdate {
    pub version: Arc<str>,
    pub flush: bool,
    pub abort_all: bool,
    /// Wait until no request holds KV before applying (unless paused).
    pub drain: bool,
    /// Answers whether the cache was flushed.
    pub done: oneshot::Sender<bool>,
}

/// What the HTTP side sees of a rank.
#[derive(Debug, Clone)]
pub struct RankHandle {
    pub rank: u32,
    pub inbox: mpsc::UnboundedSender<Command>,
    pub snapshot: Arc<Mutex<LoadView>>,
}

/// The rank's latest load figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadView {
    pub snap: Snapshot,
    pub gen_throughput: f64,
    pub paused: bool,
}

/// Starts the rank task.
pub fn spawn(
    sched: Scheduler,
    rank: u32,
    page_size: usize,
    speedup: f64,
    publisher: PublisherHandle,
    metrics: Arc<MockMetrics>,
) -> RankHandle {
    let (tx, rx) = mpsc::unbounded_channel();
    let snapshot = Arc::new(Mutex::new(LoadView::default()));
    let driver = Driver {
        sched,
        rank,
        page_size,
        speedup,
        publisher,
        metrics,
        view: snapshot.clone(),
        pending_weights: None,
        window_start: Instant::now(),
        window_tokens: 0,
        gen_throughput: 0.0,
    };
    tokio::spawn(driver.run(rx));
    RankHandle {
        rank,
        inbox: tx,
        snapshot,
    }
}

struct Driver {
    sched: Scheduler,
    rank: u32,
    page_size: usize,
    speedup: f64,
    publisher: PublisherHandle,
    metrics: Arc<MockMetrics>,
    view: Arc<Mutex<LoadView>>,
    pending_weights: Option<WeightUpdate>,
    window_start: Instant,
    window_tokens: usize,
    gen_throughput: f64,
}

impl Driver {
    async fn run(mut self, mut inbox: mpsc::UnboundedReceiver<Command>) {
        self.publish_events();
        let mut busy_until: Option<Instant> = None;
        loop {
            loop {
                match inbox.try_recv() {
                    Ok(cmd) => self.handle(cmd),
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => return,
                }
            }
            self.try_apply_weights();
            if !self.sched.has_work() {
                busy_until = None;
                self.deliver();
                self.refresh_view();
                match inbox.recv().await {
                    Some(cmd) => self.handle(cmd),
                    None => return,
                }
                continue;
            }
            // Back-to-back steps are timed from the previous deadline, so timer overshoot
            // (tokio sleeps have ~1 ms granularity) does not accumulate.
            let now = Instant::now();
            let start = match busy_until {
                Some(d) if d <= now && now - d < Duration::from_millis(5) => d,
                _ => now,
            };
            let report = self.sched.step();
            busy_until = None;
            if self.speedup > 0.0 && report.sim_ms > 0.0 {
                let deadline =
                    start + Duration::from_secs_f64(report.sim_ms / 1000.0 / self.speedup);
                if deadline > Instant::now() + Duration::from_micros(200) {
                    tokio::time::sleep_until(deadline.into()).await;
                } else {
                    tokio::task::yield_now().await;
                }
                busy_until = Some(deadline);
            } else {
                tokio::task::yield_now().await;
            }
            self.window_tokens += report.generated;
            self.deliver();
            self.refresh_view();
        }
    }

    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Submit(reqs) => self.sched.submit(reqs),
            Command::Abort { rid, all } => {
                self.sched
                    .abort(rid.as_deref(), all, "Abort by abort_request");
                self.deliver();
            }
            Command::Flush(done) => {
                let ok = self.sched.flush();
                self.publish_events();
                let _ = done.send(ok);
            }
            Command::Pause(mode, done) => {
                self.sched.pause(mode);
                self.deliver();
                let _ = done.send(());
            }
            Command::Continue(done) => {
                self.sched.resume();
                let _ = done.send(());
            }
            Command::Weights(w) => {
                if w.abort_all {
                    self.sched.abort(None, true, "Abort by weight update");
                    self.deliver();
                }
                if w.drain && !self.sched.paused() {
                    self.sched.set_draining(true);
                    self.pending_weights = Some(w);
                    self.try_apply_weights();
                } else {
                    self.apply_weights(w);
                }
            }
            Command::Memory {
                release,
                flush_kv,
                done,
            } => {
                let ok = self.sched.set_memory_released(release, flush_kv);
                self.publish_events();
                let _ = done.send(ok);
            }
            Command::PrefixLen { ns, tokens, done } => {
                let _ = done.send(self.sched.prefix_len(&ns, &tokens));
            }
            Command::ReleaseHeld(id) => self.sched.release_held(id),
        }
        self.refresh_view();
    }

    fn try_apply_weights(&mut self) {
        if self.pending_weights.is_some() && self.sched.holds_no_kv() {
            if let Some(w) = self.pending_weights.take() {
                self.sched.set_draining(false);
                self.apply_weights(w);
            }
        }
    }

    fn apply_weights(&mut self, w: WeightUpdate) {
        self.sched.set_weight_version(w.version);
        // Held (waiting) requests hold no KV, so the reset is safe once nothing runs.
        let flushed = w.flush && self.sched.reset_cache_if_no_kv();
        self.publish_events();
        let _ = w.done.send(flushed);
    }

    fn publish_events(&mut self) {
        let cache = self.sched.cache_mut();
        if !cache.has_events() {
            return;
        }
        let events = cache.take_events();
        if self.publisher.enabled() {
            let ts = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            self.publisher
                .publish_events(ts, events, self.page_size, self.rank);
        }
    }

    fn deliver(&mut self) {
        self.publish_events();
        for (tx, mut reply) in self.sched.take_outbox() {
            if let Reply::Done(d) = &mut reply {
                if self.speedup > 0.0 {
                    d.prefill_secs = d.prefill_ms / 1000.0 / self.speedup;
                }
                self.metrics.observe_done(d);
            }
            let _ = tx.send(reply);
        }
    }

    fn refresh_view(&mut self) {
        let elapsed = self.window_start.elapsed();
        if elapsed >= Duration::from_secs(1) {
            self.gen_throughput = self.window_tokens as f64 / elapsed.as_secs_f64();
            self.window_tokens = 0;
            self.window_start = Instant::now();
        }
        let mut v = self.view.lock();
        v.snap = self.sched.snapshot();
        v.gen_throughput = self.gen_throughput;
        v.paused = self.sched.paused();
    }
}
