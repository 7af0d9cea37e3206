//! `LeasedKey`: one key held under an etcd lease for as long as its owner runs. A task grants
//! a lease of the configured TTL, writes the key with it, and renews it every third of the
//! TTL; when renewal fails (etcd down, lease expired) it grants a new lease and writes the key
//! again, with a capped backoff. On stop it revokes the lease, which deletes the key at once
//! (if etcd is unreachable then, the key goes when the TTL runs out). Used by
//! `router register` for a worker key and by the router for its own replica key.

use std::time::Duration;

use etcd_client::{Client, PutOptions};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::client::timed;
use crate::backoff::ExponentialBackoff;

/// Where the key stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LeaseStatus {
    /// Not written yet (connecting, granting).
    Pending,
    /// Written under this lease id.
    Held(i64),
    /// Renewal failed; retrying (the reason).
    Lost(String),
    /// Stopped; the lease was revoked (true) or could not be (false).
    Stopped { revoked: bool },
}

/// A running holder of one key.
pub(crate) struct LeasedKey {
    status: watch::Receiver<LeaseStatus>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// Retries of grant/put after a failure: 100 ms doubling to 2 s.
const RETRY: ExponentialBackoff =
    ExponentialBackoff::constant(Duration::from_millis(100), Duration::from_secs(2));

impl LeasedKey {
    /// Starts holding `key` = `value` under leases of `ttl_secs`; stops when `stop` is
    /// cancelled (or [`Self::stop`] is called).
    pub(crate) fn spawn(
        tasks: &crate::tasks::Tasks,
        client: Client,
        key: String,
        value: Vec<u8>,
        ttl_secs: i64,
        stop: CancellationToken,
    ) -> LeasedKey {
        let (tx, status) = watch::channel(LeaseStatus::Pending);
        let held = hold(client, key, value, ttl_secs, stop.clone(), tx);
        // It ends itself once `stop` is cancelled (revoking the lease first).
        let task = tasks.spawn_with("etcd lease", |_| held);
        LeasedKey { status, stop, task }
    }

    /// Waits until the key is written (or the holder stopped); the lease id if written.
    pub(crate) async fn held(&self) -> Option<i64> {
        let mut rx = self.status.clone();
        loop {
            match &*rx.borrow_and_update() {
                LeaseStatus::Held(id) => return Some(*id),
                LeaseStatus::Stopped { .. } => return None,
                _ => {}
            }
            if rx.changed().await.is_err() {
                return None;
            }
        }
    }

    /// Stops renewing, revokes the lease (deleting the key) and waits for the task; true when
    /// the revoke reached etcd.
    pub(crate) async fn stop(self) -> bool {
        self.stop.cancel();
        let _ = self.task.await;
        let status = self.status.borrow().clone();
        matches!(status, LeaseStatus::Stopped { revoked: true })
    }
}

/// Why renewing one lease ended.
enum End {
    Stopped,
    Lost(String),
}

async fn hold(
    mut client: Client,
    key: String,
    value: Vec<u8>,
    ttl: i64,
    stop: CancellationToken,
    status: watch::Sender<LeaseStatus>,
) {
    let mut backoff = RETRY.start();
    let mut current: Option<i64> = None;
    loop {
        if stop.is_cancelled() {
            break;
        }
        match write(&mut client, &key, &value, ttl).await {
            Ok(lease) => {
                current = Some(lease);
                if !matches!(*status.borrow(), LeaseStatus::Pending) {
                    tracing::info!(%key, lease = format_args!("{lease:x}"), "etcd key written again");
                }
                status.send_replace(LeaseStatus::Held(lease));
                backoff.reset();
                match renew(&mut client, lease, ttl, &stop).await {
                    End::Stopped => break,
                    End::Lost(reason) => {
                        tracing::warn!(%key, %reason, "etcd lease renewal failed; writing the key again");
                        status.send_replace(LeaseStatus::Lost(reason));
                    }
                }
            }
            Err(reason) => {
                tracing::warn!(%key, %reason, "cannot write the etcd key; retrying");
                status.send_replace(LeaseStatus::Lost(reason));
            }
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(backoff.next_delay()) => {}
        }
    }
    let revoked = match current {
        Some(lease) => match timed(client.lease_revoke(lease)).await {
            Ok(_) => true,
            Err(reason) => {
                tracing::warn!(%key, %reason, "cannot revoke the etcd lease; the key expires with its TTL");
                false
            }
        },
        None => false,
    };
    status.send_replace(LeaseStatus::Stopped { revoked });
}

/// Grants a lease and writes the key under it.
async fn write(client: &mut Client, key: &str, value: &[u8], ttl: i64) -> Result<i64, String> {
    let grant = timed(client.lease_grant(ttl, None)).await?;
    let lease = grant.id();
    let options = PutOptions::new().with_lease(lease);
    timed(client.put(key, value, Some(options))).await?;
    Ok(lease)
}

/// Renews `lease` every third of its TTL until stopped or a renewal fails.
async fn renew(client: &mut Client, lease: i64, ttl: i64, stop: &CancellationToken) -> End {
    let (mut keeper, mut answers) = match timed(client.lease_keep_alive(lease)).await {
        Ok(pair) => pair,
        Err(e) => return End::Lost(e),
    };
    let every = Duration::from_millis(ttl.unsigned_abs() * 1000 / 3);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return End::Stopped,
            _ = tick.tick() => {}
        }
        if let Err(e) = keeper.keep_alive().await {
            return End::Lost(e.to_string());
        }
        let answer = tokio::select! {
            () = stop.cancelled() => return End::Stopped,
            a = tokio::time::timeout(every, answers.message()) => a,
        };
        match answer {
            Ok(Ok(Some(a))) if a.ttl() > 0 => {}
            Ok(Ok(Some(_))) => return End::Lost("the lease expired".to_string()),
            Ok(Ok(None)) => return End::Lost("keep-alive stream closed".to_string()),
            Ok(Err(e)) => return End::Lost(e.to_string()),
            Err(_) => return End::Lost(format!("no keep-alive answer within {every:?}")),
        }
    }
}
