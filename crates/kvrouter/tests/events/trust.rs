//! Issue 25 finding 5 (the ZMQ event path trusts anyone), against a real `router` with shipped
//! health-check defaults, a fake SGLang 0.5.23 worker (HTTP) and fake SGLang publishers (ZMQ):
//!
//! - A process that binds a dead worker's event port after it died gets nothing into that
//!   worker's index: the subscription reconnects to it, but no health round confirms the
//!   worker since, so its batches are dropped (`kvrouter_kv_events_untrusted_total`). Before the
//!   fix the squatter's 100 blocks were indexed.
//! - A worker restarted behind its URL whose new publisher's sequence continues the old one
//!   (so the cursor sees no restart) never has old and new blocks mixed in the index: the
//!   reconnected feed waits for a health round, which sees the new launch marker and clears
//!   the old incarnation first. Before the fix the new batch was applied on top of the old
//!   blocks until the next health round.
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

use crate::support;

use std::time::Duration;

use support::fake_publisher::FakePublisher;
use support::fake_worker::{port_of, server_info_0_5_23, wildcard_publisher, FakeWorker};
use support::kv::{blocks_of, debug_index, page, publish_until, wait_sources, ADMIN};
use support::sglang_wire::{batch, cleared, stored};
use support::wait::Deadline;

/// `kvrouter_kv_events_untrusted_total` summed over reasons.
async fn untrusted(c: &reqwest::Client, router: &str) -> u64 {
    let text = c
        .get(format!("{router}/metrics"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with("kvrouter_kv_events_untrusted_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// A fake worker with a publisher, a KV router over it (shipped health defaults), and the
/// worker's first three pages indexed.
struct Indexed {
    worker: FakeWorker,
    publisher: FakePublisher,
    router: support::Proc,
    url: String,
    /// `kv_events_config` and `kv_events` block of the worker's server info.
    discovery: (String, serde_json::Value),
}

async fn indexed_worker() -> Indexed {
    let mut publisher = FakePublisher::bind("").await;
    let discovery = wildcard_publisher(
        port_of(&publisher.endpoint),
        port_of(&publisher.replay_endpoint),
    );
    let worker = FakeWorker::start(server_info_0_5_23(&discovery.0, discovery.1.clone(), 0)).await;
    let router = support::router(&[
        "--mode",
        "kv",
        "--page-size",
        "16",
        "--admin-api-key",
        ADMIN,
        "--worker-urls",
        &worker.url,
    ]);
    let c = support::http::client();
    wait_sources(&c, &router.url, 1).await;
    publisher.lose(0, batch(vec![cleared()]));
    let three = batch(vec![
        stored(11, &page(1)),
        stored(12, &page(2)),
        stored(13, &page(3)),
    ]);
    let url = worker.url.clone();
    publish_until(&mut publisher, &c, &router.url, &url, 1, three, 3).await;
    Indexed {
        worker,
        publisher,
        router,
        url,
        discovery,
    }
}

#[tokio::test]
async fn a_squatter_on_a_dead_workers_event_port_indexes_nothing() {
    let Indexed {
        worker,
        publisher,
        router,
        url,
        ..
    } = indexed_worker().await;
    let c = support::http::client();
    let (endpoint, replay) = (
        publisher.endpoint.clone(),
        publisher.replay_endpoint.clone(),
    );
    // The worker dies (HTTP and events); another process binds its event ports.
    let _ = worker.stop().await;
    publisher.shut_down().await;
    let mut squatter = FakePublisher::bind_at(&endpoint, &replay, "").await;
    let hundred = batch(
        (0..100)
            .map(|i| stored(1000 + i, &page(10 + i as u32)))
            .collect(),
    );
    squatter.lose(2, hundred.clone());
    let before = untrusted(&c, &router.url).await;
    // Publish (the sequence continues the dead worker's) until the router has seen a batch:
    // either it dropped one as untrusted, or the index changed.
    let deadline = Deadline::after(Duration::from_secs(30));
    let v = loop {
        squatter.republish(2, hundred.clone()).await;
        let v = debug_index(&c, &router.url).await;
        if blocks_of(&v, &url) != 3 || untrusted(&c, &router.url).await > before {
            break v;
        }
        deadline.check("the router to receive the squatter's batch");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        blocks_of(&v, &url),
        3,
        "the squatter wrote into the dead worker's index: {v}"
    );
    squatter.shut_down().await;
}

#[tokio::test]
async fn a_restart_whose_sequence_continues_the_old_one_never_mixes_incarnations() {
    let Indexed {
        worker,
        publisher,
        router,
        url,
        discovery: (config, block),
    } = indexed_worker().await;
    let c = support::http::client();
    let (endpoint, replay) = (
        publisher.endpoint.clone(),
        publisher.replay_endpoint.clone(),
    );
    // Restart behind the same URL and ports; the new publisher's first batch is seq 2, as if
    // it continued the old stream (the cursor sees no restart).
    let (port, state) = worker.stop().await;
    publisher.shut_down().await;
    let mut publisher = FakePublisher::bind_at(&endpoint, &replay, "").await;
    state.lock().server_info = server_info_0_5_23(&config, block, 1);
    let _worker = FakeWorker::serve(port, state).await;
    let one = batch(vec![stored(21, &page(4))]);
    publisher.lose(2, one.clone());
    let deadline = Deadline::after(Duration::from_secs(60));
    loop {
        publisher.republish(2, one.clone()).await;
        let v = debug_index(&c, &router.url).await;
        let blocks = blocks_of(&v, &url);
        assert!(blocks != 4, "old and new incarnation's blocks mixed: {v}");
        if blocks == 1 {
            break;
        }
        deadline.check(&format!("only the new incarnation's block; last {v}"));
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    publisher.shut_down().await;
}

/// The registry side of the trust rule, with health rounds driven by the test: a round that
/// finds the same launch marker confirms the worker (a reconnected source may believe it
/// again); one that finds a new marker is a restart (new incarnation), not a confirmation; a
/// worker that refuses connections is never confirmed. Fails before the fix (no
/// confirmations, no trust).
#[tokio::test]
async fn health_rounds_confirm_only_the_same_incarnation() {
    use kvrouter::events::{Distrust, SourceTrust};
    use kvrouter::workers::{HealthConfig, PageSizeRule, Registry, RegistryConfig, WorkerSpec};
    let (config, block) = wildcard_publisher(1, 2);
    let worker = FakeWorker::start(server_info_0_5_23(&config, block.clone(), 0)).await;
    let reg = Registry::new(
        RegistryConfig {
            page_size: PageSizeRule::Folds { router: 16 },
            health: HealthConfig {
                interval: Duration::from_secs(3600), // rounds driven by the test
                timeout: Duration::from_secs(2),
                ..HealthConfig::default()
            },
            ..RegistryConfig::default()
        },
        &kvrouter::tasks::Tasks::new(),
    );
    let id = reg
        .add_worker(&worker.url, WorkerSpec::default())
        .await
        .unwrap();
    let w = reg.get(id).unwrap();
    let mut trust = SourceTrust::new(&w);
    assert_eq!(trust.check(), Ok(()), "the first connection is believed");
    trust.reconnected();
    assert_eq!(trust.check(), Err(Distrust::Unconfirmed));
    reg.check_health_now().await;
    assert_eq!(trust.check(), Ok(()), "the same launch marker confirms");

    trust.reconnected();
    worker.set_server_info(server_info_0_5_23(&config, block, 1));
    let confirmed = w.confirmations();
    reg.check_health_now().await;
    assert_eq!(
        w.confirmations(),
        confirmed,
        "a new launch marker is no confirmation"
    );
    assert_eq!(w.incarnation(), 1);
    assert_eq!(trust.check(), Err(Distrust::Incarnation));

    let mut trust = SourceTrust::new(&w);
    trust.reconnected();
    let _ = worker.stop().await;
    reg.check_health_now().await;
    assert_eq!(
        trust.check(),
        Err(Distrust::Unconfirmed),
        "a dead worker is never confirmed"
    );
}
