//! The router's watch of `<prefix>/workers/`: read every key once (a resync), then follow the
//! changes from the next revision. When the watch breaks (etcd restarted or unreachable) it
//! reconnects with a capped backoff and resumes from the revision after the last one applied,
//! so changes made meanwhile are replayed in order; when that revision was compacted away, or
//! etcd's history restarted (a new cluster, a revision behind ours), it resyncs from a full
//! read instead. Values that are not valid worker records are logged and skipped.

use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, WatchOptions, WatchResponse};
use tokio_util::sync::CancellationToken;

use super::client::timed;
use super::fleet::{Fleet, FleetOps, Outcome};
use crate::backoff::ExponentialBackoff;

/// Reconnect backoff: 100 ms doubling to 2 s.
const RECONNECT: ExponentialBackoff =
    ExponentialBackoff::constant(Duration::from_millis(100), Duration::from_secs(2));

/// How often values refused for a passing reason (a URL still draining) are put again.
const RETRY_EVERY: Duration = Duration::from_millis(500);

/// Where the watch resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resume {
    /// Read everything again.
    Resync,
    /// Watch from this revision (the one after the last applied).
    From(i64),
}

/// Why one watch stream ended.
enum Broke {
    Stopped,
    /// Reconnect and resume.
    Retry(Resume, String),
}

/// Follows `prefix` (the `<prefix>/workers/` key prefix) into `fleet` until `stop`.
pub(crate) async fn run(
    mut client: Client,
    prefix: String,
    ops: &(dyn FleetOps + Sync),
    fleet: &mut Fleet,
    stop: CancellationToken,
) {
    let mut backoff = RECONNECT.start();
    let mut resume = Resume::Resync;
    let mut last_cluster: Option<u64> = None;
    loop {
        if let Resume::Resync = resume {
            match resync(&mut client, &prefix, ops, fleet).await {
                Ok((revision, cluster)) => {
                    resume = Resume::From(revision + 1);
                    last_cluster = Some(cluster);
                }
                Err(reason) => {
                    tracing::warn!(%prefix, %reason, "etcd discovery: cannot read the worker keys; retrying");
                    if sleep_or_stop(&stop, backoff.next_delay()).await {
                        return;
                    }
                    continue;
                }
            }
        }
        let Resume::From(from) = resume else { continue };
        match follow(
            &mut client,
            &prefix,
            from,
            &mut last_cluster,
            ops,
            fleet,
            &stop,
            &mut backoff,
        )
        .await
        {
            Broke::Stopped => return,
            Broke::Retry(next, reason) => {
                tracing::warn!(%prefix, %reason, ?next, "etcd discovery: watch interrupted; reconnecting");
                resume = next;
            }
        }
        if sleep_or_stop(&stop, backoff.next_delay()).await {
            return;
        }
    }
}

/// Sleeps `delay`; true when stopped meanwhile.
async fn sleep_or_stop(stop: &CancellationToken, delay: Duration) -> bool {
    tokio::select! {
        () = stop.cancelled() => true,
        () = tokio::time::sleep(delay) => false,
    }
}

/// Reads every worker key and reconciles; returns the read's revision and cluster id.
async fn resync(
    client: &mut Client,
    prefix: &str,
    ops: &(dyn FleetOps + Sync),
    fleet: &mut Fleet,
) -> Result<(i64, u64), String> {
    let resp = timed(client.get(prefix, Some(GetOptions::new().with_prefix()))).await?;
    let header = resp.header().ok_or("no response header")?;
    let (revision, cluster) = (header.revision(), header.cluster_id());
    let kvs: Vec<(String, Vec<u8>)> = resp
        .kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                kv.value().to_vec(),
            )
        })
        .collect();
    for (key, outcome) in fleet.resync(ops, &kvs) {
        log_outcome(&key, &outcome);
    }
    tracing::info!(%prefix, revision, keys = kvs.len(), workers = fleet.len(), "etcd discovery: resynced");
    Ok((revision, cluster))
}

/// Watches from `from` and applies events until the stream breaks or `stop`.
#[allow(clippy::too_many_arguments)]
async fn follow(
    client: &mut Client,
    prefix: &str,
    from: i64,
    last_cluster: &mut Option<u64>,
    ops: &(dyn FleetOps + Sync),
    fleet: &mut Fleet,
    stop: &CancellationToken,
    backoff: &mut crate::backoff::BackoffState,
) -> Broke {
    let options = WatchOptions::new()
        .with_prefix()
        .with_start_revision(from)
        .with_progress_notify();
    let mut stream = match timed(client.watch(prefix, Some(options))).await {
        Ok(s) => s,
        Err(e) => return Broke::Retry(Resume::From(from), e),
    };
    let mut next = from;
    let mut retry = tokio::time::interval(RETRY_EVERY);
    loop {
        let message = tokio::select! {
            () = stop.cancelled() => return Broke::Stopped,
            _ = retry.tick(), if fleet.has_pending() => {
                for (key, outcome) in fleet.retry(ops) {
                    log_outcome(&key, &outcome);
                }
                continue;
            }
            m = stream.message() => m,
        };
        let resp = match message {
            Ok(Some(r)) => r,
            Ok(None) => return Broke::Retry(Resume::From(next), "watch stream closed".into()),
            Err(e) => return Broke::Retry(Resume::From(next), e.to_string()),
        };
        if let Some(broke) = check_response(&resp, next, last_cluster) {
            return broke;
        }
        if resp.created() {
            backoff.reset();
            tracing::info!(%prefix, from = next, "etcd discovery: watching");
        }
        for event in resp.events() {
            let Some(kv) = event.kv() else { continue };
            let key = String::from_utf8_lossy(kv.key());
            let outcome = match event.event_type() {
                EventType::Put => fleet.put(ops, &key, kv.value()),
                EventType::Delete => fleet.delete(ops, &key),
            };
            log_outcome(&key, &outcome);
            next = next.max(kv.mod_revision() + 1);
        }
    }
}

/// A response that ends the stream: cancelled or compacted (resync), or from another cluster
/// or an older history than what was applied (resync).
fn check_response(
    resp: &WatchResponse,
    next: i64,
    last_cluster: &mut Option<u64>,
) -> Option<Broke> {
    if resp.compact_revision() > 0 {
        return Some(Broke::Retry(
            Resume::Resync,
            format!(
                "revision {next} was compacted (oldest kept {})",
                resp.compact_revision()
            ),
        ));
    }
    if resp.canceled() {
        return Some(Broke::Retry(
            Resume::Resync,
            format!("watch cancelled: {}", resp.cancel_reason()),
        ));
    }
    if let Some(h) = resp.header() {
        if last_cluster.is_some_and(|c| c != h.cluster_id()) {
            *last_cluster = Some(h.cluster_id());
            return Some(Broke::Retry(Resume::Resync, "etcd cluster changed".into()));
        }
        if resp.created() && h.revision() + 1 < next {
            return Some(Broke::Retry(
                Resume::Resync,
                format!(
                    "etcd is at revision {} behind the {} applied",
                    h.revision(),
                    next - 1
                ),
            ));
        }
    }
    None
}

fn log_outcome(key: &str, outcome: &Outcome) {
    match outcome {
        Outcome::Added(url) => tracing::info!(%key, %url, "etcd discovery: registering worker"),
        Outcome::AlreadyRegistered(url) => {
            tracing::info!(%key, %url, "etcd discovery: worker already registered (left as it is)")
        }
        Outcome::Removed(url) => {
            tracing::info!(%key, %url, "etcd discovery: key gone; draining and removing worker")
        }
        Outcome::Moved { from, to } => {
            tracing::info!(%key, %from, %to, "etcd discovery: worker URL changed")
        }
        Outcome::Unchanged => tracing::debug!(%key, "etcd discovery: no change"),
        Outcome::Skipped(reason) => {
            tracing::warn!(%key, %reason, "etcd discovery: skipping a key whose value is not a valid worker record")
        }
        Outcome::Refused { url, error } => {
            tracing::error!(%key, %url, %error, "etcd discovery: the registry refused the worker")
        }
    }
}
