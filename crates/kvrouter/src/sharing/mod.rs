//! Shared predictions across router replicas (docs/events.md "Shared predictions").
//!
//! Replicas behind one load balancer each see only the requests they route, so a
//! predict-on-route booking made by one is invisible to the others until the worker's KV
//! events arrive, and siblings spread over replicas miss one shared prefill. With
//! `--nats-url` (and `--share-predictions`, on by default) every replica publishes its
//! bookings and their follow-ups on core NATS (`publisher.rs`, batched, bounded, never
//! blocking the request path) and applies the others' to its own index (`applier.rs`).
//! Nothing is durable: a prediction older than its TTL is worthless.

pub(crate) mod applier;
pub(crate) mod metrics;
pub(crate) mod pending;
pub(crate) mod publisher;
pub(crate) mod wire;

use std::sync::Arc;

pub(crate) use applier::Applier;
pub(crate) use publisher::Publisher;

use kvrouter_index::KvIndex;

use crate::routing::kv::BookingHook;
use crate::workers::Registry;

/// Starts sharing for `index`: returns the booking hook at once and connects to `nats_url`
/// in the background (until connected, bookings are dropped from the full queue and counted).
pub(crate) fn start(
    tasks: &crate::tasks::Tasks,
    nats_url: &str,
    auth: &crate::events::nats_auth::NatsAuth,
    index: Arc<KvIndex>,
    registry: &Registry,
) -> Arc<dyn BookingHook> {
    let instance = crate::events::relay_lock::instance_id();
    let (publisher, rx) = Publisher::new(publisher::QUEUE);
    let watch = registry.watch();
    let resolve: applier::Resolve = Box::new(move |url: &str| {
        let url = url.trim_end_matches('/');
        watch.borrow().iter().find(|w| w.url == url).map(|w| w.id)
    });
    let applier = Arc::new(Applier::new(
        index,
        instance.clone(),
        resolve,
        applier::PENDING,
    ));
    let url = nats_url.to_owned();
    let auth = auth.clone();
    let spawner = tasks.clone();
    tasks.spawn("sharing publisher", async move {
        // no_echo: the server does not send our own publications back (each replica would
        // otherwise decode all of its own traffic); the applier still skips its instance id.
        let options = match auth.options().await {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(nats_url = %url, error = %e, "cannot read the NATS credentials: predictions are not shared");
                return;
            }
        };
        let client = match options.no_echo().connect(&url).await {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(nats_url = %url, error = %e, "cannot connect to NATS: predictions are not shared");
                return;
            }
        };
        let sub = match client.subscribe(wire::SUBJECT).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(nats_url = %url, error = %e, "cannot subscribe to shared predictions");
                return;
            }
        };
        if let Err(e) = client.flush().await {
            tracing::warn!(error = %e, "NATS flush after subscribing failed");
        }
        metrics::metrics().subscribed.set(1);
        tracing::info!(nats_url = %url, %instance, "sharing predictions with the other replicas");
        spawner.spawn("sharing applier", applier::run(applier, sub));
        publisher::run(client, instance, rx).await;
    });
    Arc::new(publisher)
}
