//! The NATS side of the event runtime: connects once (`--nats-url`, with its credentials),
//! fills the mode's slot (the relay, or the JetStream stream) and starts the core consumer
//! (Dynamo `RouterEvent`s, plus the relay subjects when no relay of ours and no stream
//! carries them).

use std::sync::Arc;

use super::mode::{FeedMode, JsStream};
use super::EventSources;
use super::FeedSettings;
use crate::events::nats_envelope::DEFAULT_RELAY_PREFIX;
use crate::events::{JetStreamSetup, NatsConsumer, NatsConsumerConfig, NatsRelay, WorkerKey};

impl EventSources {
    /// Connects to NATS and starts what the mode reads or writes there (no-op without
    /// `--nats-url`); a failure is logged and the sources run without NATS.
    pub(super) async fn start_nats(&self, config: &FeedSettings) {
        let Some(url) = config.nats_url.as_deref() else {
            return;
        };
        if let Err(e) = self.connect_nats(url, config).await {
            tracing::error!(nats_url = %url, error = %e, "cannot start the NATS KV event feed");
        }
    }

    async fn connect_nats(&self, url: &str, config: &FeedSettings) -> anyhow::Result<()> {
        let auth = &config.nats_auth;
        let dynamo = config.dynamo.clone();
        let client = auth.connect(url).await?;
        let mut cfg = NatsConsumerConfig::new(self.page_size);
        if !dynamo.subjects.is_empty() {
            cfg.dynamo_subjects = dynamo.subjects.clone();
        }
        match (&self.mode, config.jetstream.clone()) {
            (FeedMode::Relay(relay), Some(js)) => {
                // Relayed batches go to the stream (per worker); core NATS keeps Dynamo only.
                cfg.relay_prefix = None;
                let setup = JetStreamSetup::open(client.clone(), js).await?;
                let instance = crate::events::relay_lock::instance_id();
                let started = NatsRelay::start_jetstream(&self.tasks, setup, instance).await?;
                let _ = relay.set(started);
            }
            (FeedMode::Relay(relay), None) => {
                cfg.relay_prefix = None;
                let started = NatsRelay::start(&self.tasks, client.clone(), DEFAULT_RELAY_PREFIX);
                let _ = relay.set(started);
            }
            (FeedMode::JetStream(js_feeds), Some(js)) => {
                // Relayed batches come from the stream (per worker); core NATS keeps Dynamo only.
                cfg.relay_prefix = None;
                let setup = JetStreamSetup::open(client.clone(), js).await?;
                let prefix = setup.config.prefix.clone();
                let stream = JsStream {
                    client: client.clone(),
                    stream: setup.stream,
                    prefix,
                };
                let _ = js_feeds.stream.set(stream);
            }
            _ => {}
        }
        let watch = self.watch.clone();
        let resolver = move |key: WorkerKey<'_>| match key {
            WorkerKey::Url(u) => watch
                .borrow()
                .iter()
                .find(|w| w.url == u.trim_end_matches('/'))
                .map(|w| w.id),
            WorkerKey::Dynamo(id) => dynamo.workers.resolve(&watch.borrow(), id),
        };
        let sink = self.sink.clone();
        let handle =
            NatsConsumer::start(&self.tasks, client, cfg, Arc::new(resolver), sink).await?;
        let _ = self.nats.set(handle);
        let relay = matches!(self.mode, FeedMode::Relay(_));
        tracing::info!(nats_url = %url, relay, auth = auth.kind(), "NATS KV event feed started");
        Ok(())
    }
}
