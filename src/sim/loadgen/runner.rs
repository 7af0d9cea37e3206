//! `Runner`: sends the requests workloads plan. It owns the client, the URL pick,
//! the concurrency slots, the run's deadline and the collected records.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio::time::{timeout_at, Instant};

use super::client::HttpClient;
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
    timeout: Duration,
    dispatched: AtomicU64,
    records: Mutex<Vec<RequestRecord>>,
}

impl Runner {
    /// A runner for `cfg` (already validated) whose clock starts now.
    pub fn new(cfg: &LoadgenConfig) -> anyhow::Result<Runner> {
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
            timeout: cfg.timeout(),
            dispatched: AtomicU64::new(0),
            records: Mutex::new(Vec::new()),
        })
    }

    /// When the run started.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// When the run must end.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// True once nothing new may start.
    pub fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Sends `spec` once a concurrency slot is free, records the outcome, and
    /// returns the response when it succeeded. Nothing is sent (or recorded) once
    /// the run has expired.
    pub async fn send(&self, spec: RequestSpec) -> Option<ResponseInfo> {
        let Ok(Ok(_slot)) = timeout_at(self.deadline, self.slots.acquire()).await else {
            return None;
        };
        if self.expired() {
            return None;
        }
        let target = self.target(&spec);
        let index = self.dispatched.fetch_add(1, Ordering::Relaxed);
        let body = self.body.body(&spec);
        let sent = Instant::now();
        let timeout_end = sent + self.timeout;
        let limit = timeout_end.min(self.deadline);
        let result = timeout_at(
            limit,
            self.client
                .post(&target.uri, body, spec.routing_key.as_deref()),
        )
        .await;
        let e2e = sent.elapsed();
        let mut record = RequestRecord {
            index,
            tag: spec.tag,
            routing_key: spec.routing_key,
            url: target.base.clone(),
            worker: target.direct_label.clone(),
            status: RequestStatus::Failed,
            http_status: None,
            error: None,
            scheduled_ms: ms(spec.scheduled),
            start_ms: ms(sent - self.start),
            ttft_ms: None,
            e2e_ms: ms(e2e),
            prompt_len: spec.input_ids.len() as u64,
            prompt_tokens: None,
            cached_tokens: None,
            completion_tokens: None,
            finish_reason: None,
        };
        let mut ok_info = None;
        match result {
            Err(_) if limit < timeout_end => {
                record.status = RequestStatus::Cancelled;
                record.error = Some("cancelled: max duration reached".into());
            }
            Err(_) => record.error = Some(format!("timeout after {:?}", self.timeout)),
            Ok(Err(e)) => record.error = Some(e.to_string()),
            Ok(Ok(x)) => {
                let info = x.info;
                record.http_status = Some(x.status.as_u16());
                if let Some(w) = x.worker {
                    record.worker = w;
                }
                record.ttft_ms = Some(x.ttft.map_or(record.e2e_ms, ms));
                record.prompt_tokens = info.prompt_tokens;
                record.cached_tokens = info.cached_tokens;
                record.completion_tokens = info.completion_tokens;
                record.finish_reason = info.finish_reason.clone();
                record.error = if !x.status.is_success() {
                    Some(format!(
                        "HTTP {}: {}",
                        x.status.as_u16(),
                        info.error.as_deref().unwrap_or("")
                    ))
                } else if let Some(e) = &info.error {
                    Some(e.clone())
                } else if info.aborted() {
                    Some("aborted by the server".into())
                } else {
                    None
                };
                if record.error.is_none() {
                    record.status = RequestStatus::Ok;
                    ok_info = Some(info);
                }
            }
        }
        self.records.lock().push(record);
        ok_info
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
