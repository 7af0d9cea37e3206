//! `Runner`: sends the requests workloads plan. It owns the client, the URL pick,
//! the concurrency slots, when the run stops (deadline or stop request), the
//! simulated clock (`sim_speedup`: sleeps shrink by it, recorded durations grow by
//! it) and the collected records.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use super::client::{ClientError, Exchange, HttpClient};
use super::config::{LoadgenConfig, UrlPick};
use super::record::{RequestRecord, RequestStatus};
use super::request::{BodyOptions, RequestSpec};
use super::response::ResponseInfo;

/// One base URL and how its requests are labelled when the endpoint names no worker.
struct Target {
    base: String,
    uri: String,
    direct_label: String,
}

/// Shared by every task of a run.
pub struct Runner {
    client: HttpClient,
    targets: Vec<Target>,
    pick: UrlPick,
    next_target: AtomicUsize,
    slots: Semaphore,
    body: BodyOptions,
    start: Instant,
    deadline: Instant,
    stop: CancellationToken,
    timeout: Duration,
    speedup: f64,
    dispatched: AtomicU64,
    records: Mutex<Vec<RequestRecord>>,
}

impl Runner {
    /// A runner for `cfg` (already validated) whose clock starts now; cancelling
    /// `stop` ends the run early, like reaching its deadline.
    pub fn new(cfg: &LoadgenConfig, stop: CancellationToken) -> anyhow::Result<Runner> {
        let endpoint = cfg.endpoint();
        let several = cfg.urls.len() > 1;
        let targets = cfg
            .urls
            .iter()
            .map(|raw| {
                let base = raw.trim_end_matches('/').to_string();
                let url = url::Url::parse(&base)?;
                let authority = format!(
                    "{}:{}",
                    url.host_str().unwrap_or("?"),
                    url.port_or_known_default().unwrap_or(80)
                );
                Ok(Target {
                    uri: format!("{base}{}", endpoint.path()),
                    direct_label: if several {
                        format!("direct@{authority}")
                    } else {
                        "direct".to_string()
                    },
                    base,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let start = Instant::now();
        Ok(Runner {
            client: HttpClient::new(cfg.api_key.as_deref())?,
            targets,
            pick: cfg.url_pick,
            next_target: AtomicUsize::new(0),
            slots: Semaphore::new(cfg.concurrency as usize),
            body: BodyOptions {
                endpoint,
                stream: cfg.stream,
                model: cfg.model.clone(),
                return_logprob: cfg.return_logprob,
            },
            start,
            deadline: start + cfg.max_duration(),
            stop,
            timeout: cfg.timeout(),
            speedup: cfg.sim_speedup,
            dispatched: AtomicU64::new(0),
            records: Mutex::new(Vec::new()),
        })
    }

    /// When the run started.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// True once nothing new may start (deadline reached or stop requested).
    pub fn expired(&self) -> bool {
        self.stop.is_cancelled() || Instant::now() >= self.deadline
    }

    /// Resolves when the run must stop.
    pub async fn stopped(&self) {
        tokio::select! {
            _ = sleep_until(self.deadline) => {}
            _ = self.stop.cancelled() => {}
        }
    }

    /// The wall time that `sim` of simulated time takes (`sim / sim_speedup`).
    pub fn wall(&self, sim: Duration) -> Duration {
        Duration::try_from_secs_f64(sim.as_secs_f64() / self.speedup).unwrap_or(Duration::MAX)
    }

    /// `wall` of wall time in simulated seconds (`wall * sim_speedup`).
    pub fn sim_secs(&self, wall: Duration) -> f64 {
        wall.as_secs_f64() * self.speedup
    }

    fn sim_ms(&self, wall: Duration) -> f64 {
        self.sim_secs(wall) * 1000.0
    }

    /// Sleeps `sim` of simulated time from now; false if the run stopped first.
    pub async fn sleep_sim(&self, sim: Duration) -> bool {
        if sim.is_zero() {
            return !self.expired();
        }
        let at = Instant::now()
            .checked_add(self.wall(sim))
            .unwrap_or(self.deadline);
        self.sleep_until(at).await
    }

    /// Sleeps until `at`; false if the run stopped first.
    pub async fn sleep_until(&self, at: Instant) -> bool {
        tokio::select! {
            _ = sleep_until(at) => !self.expired(),
            _ = self.stopped() => false,
        }
    }

    /// Sends `spec` once a concurrency slot is free, records the outcome, and
    /// returns the response when it succeeded. Nothing is sent (or recorded) once
    /// the run has stopped.
    pub async fn send(&self, spec: RequestSpec) -> Option<ResponseInfo> {
        let slot = tokio::select! {
            slot = self.slots.acquire() => slot.ok(),
            _ = self.stopped() => None,
        };
        if slot.is_none() || self.expired() {
            return None;
        }
        let target = self.target(&spec);
        let index = self.dispatched.fetch_add(1, Ordering::Relaxed);
        let body = self.body.body(&spec);
        let sent = Instant::now();
        let end = tokio::select! {
            result = self.client.post(&target.uri, body, spec.routing_key.as_deref()) => End::Done(result),
            _ = sleep_until(sent + self.timeout) => End::TimedOut,
            _ = self.stopped() => End::Stopped,
        };
        let e2e = sent.elapsed();
        let mut record = RequestRecord {
            index,
            tag: spec.tag,
            batch: spec.batch,
            routing_key: spec.routing_key,
            url: target.base.clone(),
            worker: target.direct_label.clone(),
            status: RequestStatus::Failed,
            http_status: None,
            error: None,
            scheduled_ms: self.sim_ms(spec.scheduled),
            start_ms: self.sim_ms(sent - self.start),
            ttft_ms: None,
            e2e_ms: self.sim_ms(e2e),
            prompt_len: spec.input_ids.len() as u64,
            prompt_tokens: None,
            cached_tokens: None,
            completion_tokens: None,
            finish_reason: None,
        };
        let ok_info = self.settle(&mut record, end);
        self.records.lock().push(record);
        ok_info
    }

    /// Fills `record` from how the exchange ended; the response if it succeeded.
    fn settle(&self, record: &mut RequestRecord, end: End) -> Option<ResponseInfo> {
        let x = match end {
            End::Stopped => {
                record.status = RequestStatus::Cancelled;
                record.error = Some(if self.stop.is_cancelled() {
                    "cancelled: run stopped".into()
                } else {
                    "cancelled: max duration reached".into()
                });
                return None;
            }
            End::TimedOut => {
                record.error = Some(format!("timeout after {:?}", self.timeout));
                return None;
            }
            End::Done(Err(e)) => {
                record.error = Some(e.to_string());
                return None;
            }
            End::Done(Ok(x)) => x,
        };
        let info = x.info;
        let status = x.status.as_u16();
        record.http_status = Some(status);
        if let Some(w) = x.worker {
            record.worker = w;
        }
        record.ttft_ms = Some(x.ttft.map_or(record.e2e_ms, |t| self.sim_ms(t)));
        record.prompt_tokens = info.prompt_tokens;
        record.cached_tokens = info.cached_tokens;
        record.completion_tokens = info.completion_tokens;
        record.finish_reason = info.finish_reason.clone();
        record.error = match (&info.error, x.status.is_success()) {
            (Some(e), false) => Some(format!("HTTP {status}: {e}")),
            (None, false) => Some(format!("HTTP {status}")),
            (Some(e), true) => Some(e.clone()),
            (None, true) if info.aborted() => Some("aborted by the server".into()),
            (None, true) => None,
        };
        if record.error.is_some() {
            return None;
        }
        record.status = RequestStatus::Ok;
        Some(info)
    }

    /// Records so far, in dispatch order.
    pub fn take_records(&self) -> Vec<RequestRecord> {
        let mut records = std::mem::take(&mut *self.records.lock());
        records.sort_by_key(|r| r.index);
        records
    }

    fn target(&self, spec: &RequestSpec) -> &Target {
        let n = self.targets.len();
        let i = match self.pick {
            UrlPick::RoundRobin => self.next_target.fetch_add(1, Ordering::Relaxed) % n,
            UrlPick::Sticky => (spec.affinity % n as u64) as usize,
        };
        &self.targets[i]
    }
}

/// How one exchange ended.
enum End {
    Done(Result<Exchange, ClientError>),
    TimedOut,
    Stopped,
}
