//! Runs one control call against a set of workers: the router-side effect before (gate,
//! drain), the concurrent calls, and the effects after each success (gate reopened, cache
//! hook fired, weight version updated, `awaiting_refit` levelled). Every call is logged.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::join_all;
use http::{Method, StatusCode};
use serde_json::Value;
use tokio::time::Instant;

use super::ops::{prepare_bodies, Op};
use super::state::{relevel, RefitState};
use crate::proxy::{fanout, UpstreamClient};
use crate::workers::{Registry, Worker};

/// One worker's answer (or why there is none).
#[derive(Debug, Clone)]
pub struct FanoutOutcome {
    pub worker: Arc<Worker>,
    /// HTTP status from the worker (`None`: it was not reached).
    pub status: Option<StatusCode>,
    pub body: Bytes,
    /// Transport error, or a failure the router found in a 2xx body (`"success": false`).
    pub error: Option<String>,
    pub latency_ms: u64,
}

impl FanoutOutcome {
    pub fn succeeded(&self) -> bool {
        self.error.is_none() && self.status.is_some_and(|s| s.is_success())
    }

    /// The body as JSON when it is JSON, else as a string (null when empty).
    pub fn body_json(&self) -> Value {
        if self.body.is_empty() {
            return Value::Null;
        }
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&self.body).into_owned()))
    }

    /// A one-line reason for a failure.
    pub fn failure_message(&self) -> String {
        if let Some(e) = &self.error {
            return e.clone();
        }
        let status = self.status.map_or(0, |s| s.as_u16());
        let body = String::from_utf8_lossy(&self.body);
        format!("HTTP {status}: {}", body.trim())
    }
}

/// The result of one control call.
#[derive(Debug)]
pub struct Execution {
    pub path: String,
    pub op: Op,
    pub outcomes: Vec<FanoutOutcome>,
    /// Extra facts to report (the rank assignment of `/init_weights_update_group`).
    pub report: Option<Value>,
    /// A note when nothing was called (e.g. an unknown rid).
    pub note: Option<String>,
}

impl Execution {
    pub fn all_ok(&self) -> bool {
        self.outcomes.iter().all(FanoutOutcome::succeeded)
    }

    pub fn succeeded(&self) -> usize {
        self.outcomes.iter().filter(|o| o.succeeded()).count()
    }
}

/// What the caller gets instead of an execution: a bad request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadControlCall(pub String);

/// Everything `run` needs from the router.
pub struct Ctx<'a> {
    pub refit: &'a RefitState,
    pub registry: &'a Registry,
    pub client: &'a UpstreamClient,
}

/// `{"success": false}` in a 2xx body is a failure too (SGLang's refit routes).
fn reported_failure(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    (v.get("success") == Some(&Value::Bool(false))).then(|| {
        let msg = v.get("message").and_then(Value::as_str).unwrap_or("");
        format!("worker reported success=false: {msg}")
    })
}

async fn call_one(
    ctx: &Ctx<'_>,
    method: Method,
    w: Arc<Worker>,
    path_and_query: &str,
    body: Bytes,
) -> FanoutOutcome {
    let started = Instant::now();
    let r = fanout::call(
        ctx.client,
        method,
        w.as_ref().into(),
        path_and_query,
        body,
        ctx.refit.config.call_timeout,
    )
    .await;
    let latency_ms = started.elapsed().as_millis() as u64;
    match r {
        Ok((status, _, body)) => {
            let error = if status.is_success() {
                reported_failure(&body)
            } else {
                None
            };
            FanoutOutcome {
                worker: w,
                status: Some(status),
                body,
                error,
                latency_ms,
            }
        }
        Err(e) => FanoutOutcome {
            worker: w,
            status: None,
            body: Bytes::new(),
            error: Some(e),
            latency_ms,
        },
    }
}

/// Waits until `w` has nothing in flight (bounded).
async fn drain(w: Arc<Worker>, timeout: Duration) -> FanoutOutcome {
    let started = Instant::now();
    let drained = tokio::time::timeout(timeout, w.wait_idle()).await.is_ok();
    let latency_ms = started.elapsed().as_millis() as u64;
    let (status, error, msg) = if drained {
        (
            StatusCode::OK,
            None,
            "Generation paused: drained by the router.",
        )
    } else {
        (
            StatusCode::GATEWAY_TIMEOUT,
            Some(format!(
                "drain timed out after {timeout:?} with {} requests in flight",
                w.in_flight()
            )),
            "drain timed out",
        )
    };
    let body = serde_json::json!({"status": if drained {"ok"} else {"timeout"}, "message": msg, "mode": "wait"});
    FanoutOutcome {
        worker: w,
        status: Some(status),
        body: Bytes::from(body.to_string()),
        error,
        latency_ms,
    }
}

/// The weight version `w` reports now (`/model_info`, else `/get_weight_version`).
async fn read_version(ctx: &Ctx<'_>, w: &Worker) -> Option<String> {
    let t = Duration::from_secs(10);
    for path in ["/model_info", "/get_model_info"] {
        if let Ok((s, _, b)) =
            fanout::call(ctx.client, Method::GET, w.into(), path, Bytes::new(), t).await
        {
            if s.is_success() {
                let v: Value = serde_json::from_slice(&b).ok()?;
                return match v.get("weight_version") {
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(Value::Number(n)) => Some(n.to_string()),
                    _ => None,
                };
            }
        }
    }
    None
}

/// Runs `method path_and_query` with `body` on `targets` (see module docs). `fleet_wide`
/// says the targets are every eligible worker, so a pause closes the router-wide gate.
pub(crate) async fn run(
    ctx: &Ctx<'_>,
    method: Method,
    path_and_query: &str,
    body: Bytes,
    mut targets: Vec<Arc<Worker>>,
    fleet_wide: bool,
) -> Result<Execution, BadControlCall> {
    let path = path_and_query
        .split('?')
        .next()
        .unwrap_or(path_and_query)
        .to_string();
    let op = Op::classify(&path, &body).map_err(BadControlCall)?;
    let mut note = None;
    if let Op::Abort { rid: Some(rid) } = &op {
        let holder = ctx.refit.rids.worker_of(rid);
        targets.retain(|w| holder.as_ref().is_some_and(|h| h.id == w.id));
        if targets.is_empty() {
            note = Some(format!("rid {rid:?} is not in flight on any target worker"));
        }
    }
    let started = Instant::now();
    let (bodies, report) = prepare_bodies(&op, &targets, &body).map_err(BadControlCall)?;
    if let Op::Pause { mode } = &op {
        if fleet_wide {
            ctx.refit.gate.close(mode);
        }
        for w in &targets {
            w.set_paused(true);
        }
    }
    let outcomes: Vec<FanoutOutcome> = match &op {
        Op::Pause { mode } if mode == "wait" => {
            let t = ctx.refit.config.drain_timeout;
            join_all(targets.iter().map(|w| drain(w.clone(), t))).await
        }
        _ => {
            join_all(
                targets
                    .iter()
                    .zip(bodies)
                    .map(|(w, b)| call_one(ctx, method.clone(), w.clone(), path_and_query, b)),
            )
            .await
        }
    };
    apply_effects(ctx, &op, &outcomes, fleet_wide).await;
    super::metrics::RefitMetrics::get()
        .gate_closed
        .set(i64::from(ctx.refit.gate.is_closed()));
    let exec = Execution {
        path,
        op,
        outcomes,
        report,
        note,
    };
    log(&exec, started.elapsed());
    Ok(exec)
}

async fn apply_effects(ctx: &Ctx<'_>, op: &Op, outcomes: &[FanoutOutcome], fleet_wide: bool) {
    if *op == Op::Continue {
        for o in outcomes.iter().filter(|o| o.succeeded()) {
            o.worker.set_paused(false);
        }
        if fleet_wide {
            let released = ctx.refit.gate.open();
            tracing::info!(released, "refit gate reopened");
        }
    }
    let reason = op.clears_cache();
    let mut version_changed = false;
    for o in outcomes.iter().filter(|o| o.succeeded()) {
        if let Some(reason) = reason {
            ctx.refit.cache.cleared(o.worker.id, &o.worker.url, reason);
        }
        if op.changes_version() {
            let given = match op {
                Op::WeightUpdate { version, .. } | Op::SetVersion { version } => version.clone(),
                _ => None,
            };
            let v = match given {
                Some(v) => Some(v),
                None => read_version(ctx, &o.worker).await,
            };
            if v.is_some() {
                o.worker.set_weight_version(v);
                version_changed = true;
            }
        }
    }
    if version_changed {
        relevel(ctx.registry);
    }
}

fn log(exec: &Execution, took: Duration) {
    // Bounded label values: known control paths, else "other".
    let m = super::metrics::RefitMetrics::get();
    let path = super::ops::FANOUT_PATHS
        .iter()
        .find(|p| **p == exec.path)
        .copied()
        .unwrap_or("other");
    m.duration
        .with_label_values(&[path])
        .observe(took.as_secs_f64());
    for o in &exec.outcomes {
        let outcome = if o.succeeded() { "ok" } else { "failed" };
        m.calls.with_label_values(&[path, outcome]).inc();
        let status = o.status.map_or(0, |s| s.as_u16());
        if o.succeeded() {
            tracing::info!(path = %exec.path, worker = %o.worker.url, status, latency_ms = o.latency_ms, "control call ok");
        } else {
            tracing::warn!(path = %exec.path, worker = %o.worker.url, status, latency_ms = o.latency_ms,
                error = %o.failure_message(), "control call failed");
        }
    }
    tracing::info!(path = %exec.path, total = exec.outcomes.len(), succeeded = exec.succeeded(),
        took_ms = took.as_millis() as u64, "control call finished");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::{WorkerId, WorkerInfo};

    fn busy_worker() -> Arc<Worker> {
        let w = Arc::new(Worker::new(WorkerId(1), "http://a", WorkerInfo::default()));
        w.begin_request();
        w
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_pause_answers_when_the_last_request_ends() {
        let w = busy_worker();
        let tasks = crate::tasks::Tasks::new();
        let ender = tasks.spawn("ends the request after 10 min", {
            let w = w.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(600)).await;
                w.end_request();
            }
        });
        let out = drain(w, Duration::from_secs(1800)).await;
        assert_eq!(out.status, Some(StatusCode::OK));
        assert_eq!(out.error, None);
        assert_eq!(out.latency_ms, 600_000);
        assert!(ender.await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_pause_gives_up_at_the_drain_timeout_naming_what_is_in_flight() {
        let w = busy_worker();
        let out = drain(w, Duration::from_secs(1800)).await;
        assert_eq!(out.status, Some(StatusCode::GATEWAY_TIMEOUT));
        assert_eq!(out.latency_ms, 1_800_000);
        let error = out.error.unwrap_or_default();
        assert!(error.contains("1800s with 1 requests in flight"), "{error}");
        assert!(String::from_utf8_lossy(&out.body).contains("\"timeout\""));
    }
}
