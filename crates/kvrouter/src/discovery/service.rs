//! The running discovery of one router (feature `etcd`): connect, hold this replica's key,
//! watch the worker keys into the registry until shutdown.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use etcd_client::Client;
use parking_lot::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{client, fleet, keys, lease, watch, EtcdConfig, RouterRecord};
use crate::tasks::Tasks;
use crate::workers::Registry;

/// The running discovery of one router: the worker watch and this replica's own key.
pub struct Discovery {
    pub config: EtcdConfig,
    /// This replica's record (also its key's value).
    pub me: RouterRecord,
    client: OnceLock<Client>,
    stop: CancellationToken,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery")
            .field("prefix", &self.config.prefix)
            .field("router_id", &self.me.id)
            .finish()
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Discovery {
    /// Starts discovery for a router in `mode` bound at `bound` (None when `etcd` is unset).
    /// Runs until `shutdown` is cancelled, then revokes this replica's lease (see [`Self::stopped`]).
    pub fn start(
        etcd: Option<&EtcdConfig>,
        mode: &str,
        registry: &Registry,
        bound: SocketAddr,
        shutdown: &CancellationToken,
        tasks: &Tasks,
    ) -> Option<Arc<Discovery>> {
        let etcd = etcd?.clone();
        let url = etcd
            .advertise_url
            .clone()
            .unwrap_or_else(|| format!("http://{bound}"));
        let me = RouterRecord {
            id: uuid::Uuid::new_v4().to_string(),
            url,
            mode: mode.to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            started_at: unix_now(),
        };
        let discovery = Arc::new(Discovery {
            config: etcd,
            me,
            client: OnceLock::new(),
            stop: shutdown.child_token(),
            task: Mutex::new(None),
        });
        // It ends itself once `shutdown` is cancelled (see [`Self::stopped`]).
        let run = run(discovery.clone(), registry.clone(), tasks.clone());
        let task = tasks.spawn_with("etcd discovery", |_| run);
        *discovery.task.lock() = Some(task);
        Some(discovery)
    }

    /// The etcd client, once connected.
    pub fn client(&self) -> Option<Client> {
        self.client.get().cloned()
    }

    /// `GET /routers`: the replicas registered under the prefix.
    pub async fn routers_json(&self) -> Result<serde_json::Value, String> {
        super::routers::routers_json(self).await
    }

    /// Waits until discovery has stopped after shutdown (this replica's lease revoked, or
    /// given up on when etcd is unreachable).
    pub async fn stopped(&self) {
        self.stop.cancel();
        let task = self.task.lock().take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

/// Connects (retrying), then runs the replica key and the worker watch until stopped.
async fn run(discovery: Arc<Discovery>, registry: Registry, tasks: Tasks) {
    let cfg = &discovery.config;
    let client = loop {
        match client::connect(&cfg.endpoints).await {
            Ok(c) => break c,
            Err(e) => {
                tracing::warn!(endpoints = ?cfg.endpoints, error = %e, "etcd discovery: cannot connect; retrying");
                tokio::select! {
                    () = discovery.stop.cancelled() => return,
                    () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
                }
            }
        }
    };
    let _ = discovery.client.set(client.clone());
    let replica = match serde_json::to_vec(&discovery.me) {
        Ok(value) => Some(lease::LeasedKey::spawn(
            &tasks,
            client.clone(),
            keys::router_key(&cfg.prefix, &discovery.me.id),
            value,
            cfg.lease_ttl_secs,
            discovery.stop.child_token(),
        )),
        Err(e) => {
            tracing::error!(error = %e, "etcd discovery: cannot encode this router's record");
            None
        }
    };
    tracing::info!(prefix = %cfg.prefix, router_id = %discovery.me.id, url = %discovery.me.url, "etcd discovery started");
    let mut fleet = fleet::Fleet::default();
    watch::run(
        client,
        keys::workers_prefix(&cfg.prefix),
        &registry,
        &mut fleet,
        discovery.stop.clone(),
    )
    .await;
    if let Some(replica) = replica {
        let revoked = replica.stop().await;
        tracing::info!(revoked, "etcd discovery stopped; this router's key is gone");
    }
}
