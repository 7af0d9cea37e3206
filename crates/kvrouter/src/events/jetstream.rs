//! Durable relay transport (`--nats-jetstream`): the JetStream stream that keeps relayed
//! SGLang batches (subjects `<prefix>.<worker-key>.<rank>`, bounded by age and bytes) and
//! the NATS KV bucket that holds one relay lock per worker. Creating either is idempotent:
//! every router calls [`JetStreamSetup::open`] and the first one creates them.

use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};

use super::nats_envelope::DEFAULT_RELAY_PREFIX;

/// Default stream name.
pub(crate) const DEFAULT_STREAM: &str = "KVROUTER_KV";
/// Default relay-lock bucket name.
pub(crate) const DEFAULT_LOCK_BUCKET: &str = "kvrouter_relay_locks";

/// Where relayed batches are kept and how the relays elect one publisher per worker.
#[derive(Debug, Clone, PartialEq)]
pub struct JetStreamConfig {
    /// Stream name (JetStream names: no `.`, `*`, `>` or spaces).
    pub stream: String,
    /// Subject prefix: the stream holds `<prefix>.>`.
    pub prefix: String,
    /// Messages older than this are dropped by the server.
    pub max_age: Duration,
    /// The stream keeps at most this many bytes (oldest dropped first).
    pub max_bytes: i64,
    /// KV bucket of relay locks (key: worker key, value: relay instance id).
    pub lock_bucket: String,
    /// A relay lock not refreshed for this long expires (bucket `max_age`); the holder
    /// refreshes every third of it and publishes only while its lease is valid.
    pub lock_ttl: Duration,
}

impl JetStreamConfig {
    /// Defaults: stream `KVROUTER_KV` on `kvrouter.kv.>`, 1 h, 1 GiB, lock TTL 5 s.
    pub fn new() -> Self {
        Self {
            stream: DEFAULT_STREAM.to_owned(),
            prefix: DEFAULT_RELAY_PREFIX.to_owned(),
            max_age: Duration::from_secs(3600),
            max_bytes: 1 << 30,
            lock_bucket: DEFAULT_LOCK_BUCKET.to_owned(),
            lock_ttl: Duration::from_secs(5),
        }
    }
}

impl Default for JetStreamConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// The opened stream and (for relays) the lock bucket.
pub struct JetStreamSetup {
    pub context: jetstream::Context,
    pub stream: stream::Stream,
    pub config: JetStreamConfig,
}

impl JetStreamSetup {
    /// Gets or creates the stream. A stream that already exists keeps its own limits
    /// (an operator may have resized it); a mismatch is logged.
    pub async fn open(client: async_nats::Client, config: JetStreamConfig) -> anyhow::Result<Self> {
        let context = jetstream::new(client);
        let wanted = stream::Config {
            name: config.stream.clone(),
            subjects: vec![format!("{}.>", config.prefix)],
            max_age: config.max_age,
            max_bytes: config.max_bytes,
            storage: stream::StorageType::File,
            discard: stream::DiscardPolicy::Old,
            ..Default::default()
        };
        let mut stream = context
            .get_or_create_stream(wanted.clone())
            .await
            .map_err(|e| anyhow::anyhow!("JetStream stream {}: {e}", config.stream))?;
        let info = stream
            .info()
            .await
            .map_err(|e| anyhow::anyhow!("JetStream stream {} info: {e}", config.stream))?;
        if info.config.max_age != wanted.max_age
            || info.config.max_bytes != wanted.max_bytes
            || info.config.subjects != wanted.subjects
        {
            tracing::warn!(stream = %config.stream, subjects = ?info.config.subjects,
                max_age = ?info.config.max_age, max_bytes = info.config.max_bytes,
                "JetStream stream exists with other limits; keeping them");
        }
        Ok(Self {
            context,
            stream,
            config,
        })
    }

    /// Gets or creates the relay-lock bucket (history 1, `max_age` = lock TTL, file storage so
    /// a NATS restart keeps the current holders).
    pub async fn lock_bucket(&self) -> anyhow::Result<kv::Store> {
        let bucket = &self.config.lock_bucket;
        if let Ok(store) = self.context.get_key_value(bucket.as_str()).await {
            return Ok(store);
        }
        self.context
            .create_key_value(kv::Config {
                bucket: bucket.clone(),
                history: 1,
                max_age: self.config.lock_ttl,
                storage: stream::StorageType::File,
                ..Default::default()
            })
            .await
            .map_err(|e| anyhow::anyhow!("NATS KV bucket {bucket}: {e}"))
    }
}
