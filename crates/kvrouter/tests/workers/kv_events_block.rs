//! Discovery from SGLang 0.5.23's `/server_info` `kv_events` block: a fake worker serving each
//! of the two real discovery bodies of sglang-0.5.23.md M1 (a publisher on `tcp://0.0.0.0`, and
//! one on `tcp://127.0.0.1` with `"bind": true`, both of which SGLang binds) is subscribed, and
//! the router's index fills from a PUB the test runs at the advertised ports. Before the fix the
//! router logged "not subscribable" for both and its index stayed empty. An `ipc://` publisher
//! (SGLang binds it; its `kv_events` block is null, so only the config string names it) is
//! dialled at its path as-is: before that fix it was "not subscribable" too.
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

use crate::support;

use serde_json::Value;
use support::fake_publisher::FakePublisher;
use support::fake_worker::{
    bind_true_publisher, port_of, server_info_0_5_23, wildcard_publisher, FakeWorker,
};
use support::kv::{blocks_of, debug_index, kv_router_paged, wait_sources};
use support::sglang_wire::{batch, stored};
use support::wait::Deadline;

/// A KV-mode router (page 16, SGLang's page in the bodies) over `worker`.
fn router(worker: &str) -> support::Proc {
    kv_router_paged("16", &[worker], &[])
}

/// Serves `form(pub, replay)` behind a fake worker and checks the router subscribes to the
/// advertised endpoint and indexes a block published there.
async fn subscribes(form: fn(u16, u16) -> (String, Value)) {
    let publisher = FakePublisher::bind("").await;
    let (config, block) = form(
        port_of(&publisher.endpoint),
        port_of(&publisher.replay_endpoint),
    );
    subscribes_to(publisher, config, block).await;
}

/// Serves `config` + `block` behind a fake worker and checks the router subscribes to
/// `publisher` and indexes a block published there.
async fn subscribes_to(mut publisher: FakePublisher, config: String, block: Value) {
    let worker = FakeWorker::start(server_info_0_5_23(&config, block, 0)).await;
    let router = router(&worker.url);
    let c = support::http::client();
    wait_sources(&c, &router.url, 1).await;
    let tokens: Vec<u32> = (1..=16).collect();
    let payload = batch(vec![stored(0x1234, &tokens)]);
    publisher.lose(0, payload.clone());
    let deadline = Deadline::after(std::time::Duration::from_secs(30));
    loop {
        // Re-sent until the SUB link is live (slow joiner); repeats of seq 0 are stale.
        publisher.republish(0, payload.clone()).await;
        if blocks_of(&debug_index(&c, &router.url).await, &worker.url) == 1 {
            break;
        }
        deadline.check("the router to index the block published at the advertised endpoint");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    publisher.shut_down().await;
}

#[tokio::test]
async fn publisher_on_0_0_0_0_is_subscribed() {
    subscribes(wildcard_publisher).await;
}

#[tokio::test]
async fn publisher_with_bind_true_on_a_concrete_host_is_subscribed() {
    subscribes(bind_true_publisher).await;
}

/// The block alone (no `kv_events_config` string) is enough to subscribe.
#[tokio::test]
async fn block_without_the_config_string_is_subscribed() {
    subscribes(|p, r| {
        let (_, block) = wildcard_publisher(p, r);
        (String::new(), block)
    })
    .await;
}

/// An `ipc://` publisher: SGLang binds it (`ZmqEventPublisher._socket_setup`) and advertises
/// no `kv_events` block for it (`describe_kv_events_publisher` covers TCP only); the router
/// dials the path from the config string as-is (same host).
#[tokio::test]
async fn publisher_on_ipc_is_subscribed() {
    let dir = tempfile::tempdir().unwrap();
    let pub_ep = format!("ipc://{}", dir.path().join("kv.pub").display());
    let replay_ep = format!("ipc://{}", dir.path().join("kv.replay").display());
    let publisher = FakePublisher::bind_at(&pub_ep, &replay_ep, "").await;
    let config = format!(
        "{{\"publisher\": \"zmq\", \"endpoint\": \"{pub_ep}\", \"topic\": \"\", \"replay_endpoint\": \"{replay_ep}\"}}"
    );
    subscribes_to(publisher, config, Value::Null).await;
}
