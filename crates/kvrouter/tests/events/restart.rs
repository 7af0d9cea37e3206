//! A worker restarted behind its URL inside one health interval (sglang-0.5.23.md M4): the
//! new process's startup `AllBlocksCleared` (seq 0) is gone before the router's SUB reconnects,
//! and the idle worker publishes nothing else, so the event stream alone never says it restarted.
//! The router sees the changed launch marker (`startup_time`, `random_seed`) in `/server_info`
//! on its next health round: the old incarnation's blocks leave the index and the worker is
//! resubscribed (its next batch is replayed from 0). Before the fix the stale blocks stayed
//! until the new incarnation's first store reached the router.
//!
//! The same with `sglang-mock` restarted behind its URL and event ports: before the mock drew
//! its `random_seed` per launch and measured its `startup_time`, every launch reported the
//! same marker, and the old launch's blocks stayed indexed.
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

use crate::support;

use std::time::{Duration, Instant};

use support::admin::workers_as;
use support::fake_publisher::FakePublisher;
use support::fake_worker::{port_of, server_info_0_5_23, wildcard_publisher, FakeWorker};
use support::kv::{
    blocks_of, debug_index, generate, page, prompt, publish_until, wait_index, wait_sources, ADMIN,
};
use support::loadgen::metric_sum;
use support::sglang_wire::{batch, cleared, stored};
use support::wait::Deadline;

/// Health interval of the router under test (short, so one interval is quick).
const INTERVAL_SECS: &str = "1";

/// A KV-mode router over `url` with `page` and this file's health interval and admin key.
fn kv_router(url: &str, page: &str) -> support::Proc {
    support::router(&[
        "--mode",
        "kv",
        "--page-size",
        page,
        "--admin-api-key",
        ADMIN,
        "--health-check-interval-secs",
        INTERVAL_SECS,
        "--worker-urls",
        url,
    ])
}

#[tokio::test]
async fn restart_inside_one_health_interval_clears_the_old_blocks() {
    let mut publisher = FakePublisher::bind("").await;
    let (endpoint, replay) = (
        publisher.endpoint.clone(),
        publisher.replay_endpoint.clone(),
    );
    let (config, block) = wildcard_publisher(port_of(&endpoint), port_of(&replay));
    let worker = FakeWorker::start(server_info_0_5_23(&config, block.clone(), 0)).await;
    let url = worker.url.clone();
    let router = kv_router(&url, "16");
    let c = support::http::client();
    wait_sources(&c, &router.url, 1).await;
    // Incarnation 0: the startup clear, then three pages.
    publisher.lose(0, batch(vec![cleared()]));
    let three = batch(vec![
        stored(11, &page(1)),
        stored(12, &page(2)),
        stored(13, &page(3)),
    ]);
    publish_until(&mut publisher, &c, &router.url, &url, 1, three, 3).await;

    // Restart behind the same URL and ports: HTTP down and up between two health rounds, a
    // new publisher whose seq 0 (its startup clear) nobody received, then idle.
    let (port, state) = worker.stop().await;
    publisher.shut_down().await;
    let mut publisher = FakePublisher::bind_at(&endpoint, &replay, "").await;
    publisher.lose(0, batch(vec![cleared()]));
    state.lock().server_info = server_info_0_5_23(&config, block, 1);
    let worker = FakeWorker::serve(port, state).await;
    let up = Instant::now();

    let v = wait_index(&c, &router.url, "the old incarnation's blocks to go", |v| {
        blocks_of(v, &url) == 0
    })
    .await;
    let stale = up.elapsed();
    eprintln!(
        "stale window after the restart: {:.2} s (health interval {INTERVAL_SECS} s)",
        stale.as_secs_f64()
    );
    assert_eq!(blocks_of(&v, &url), 0, "{v}");
    let workers = workers_as(&router.url, ADMIN).await;
    assert_eq!(workers["workers"][0]["incarnation"], 1, "{workers}");

    // The resubscribed source replays the new incarnation from 0: only its page is indexed.
    let one = batch(vec![stored(21, &page(4))]);
    publish_until(&mut publisher, &c, &router.url, &worker.url, 1, one, 1).await;
    publisher.shut_down().await;
}

/// `kvrouter_worker_health_checks_total` of a router (all results).
async fn health_rounds(c: &reqwest::Client, router: &str) -> u64 {
    let page = support::http::get_text(c, &format!("{router}/metrics")).await;
    metric_sum(&page, "kvrouter_worker_health_checks_total")
}

#[tokio::test]
async fn mock_restarted_inside_one_health_interval_is_cleared() {
    let (pub_port, replay_port) = (support::free_port(), support::free_port());
    let config = format!(
        r#"{{"publisher":"zmq","endpoint":"tcp://*:{pub_port}","replay_endpoint":"tcp://*:{replay_port}"}}"#
    );
    let flags = [
        "--page-size",
        "4",
        "--speedup",
        "0",
        "--kv-events-config",
        &config,
    ];
    let mut mock = support::mock(&flags);
    let url = mock.url.clone();
    let port = port_of(&url);
    let router = kv_router(&url, "4");
    let c = support::http::client();
    wait_sources(&c, &router.url, 1).await;
    // Requests straight to the mock until the router indexes its blocks (slow joiner).
    let deadline = Deadline::after(Duration::from_secs(30));
    let mut seed = 0;
    while blocks_of(&debug_index(&c, &router.url).await, &url) == 0 {
        deadline.check("the router to index the mock's blocks");
        seed += 1;
        let (status, _, _) = generate(&c, &url, &prompt(seed, 16), 1).await;
        assert_eq!(status, 200);
    }

    // Restart right after a health round, so the whole down window falls between two rounds
    // (no refused health check tells the router): same URL, same event ports, then idle.
    let rounds = health_rounds(&c, &router.url).await;
    let deadline = Deadline::after(Duration::from_secs(10));
    while health_rounds(&c, &router.url).await == rounds {
        deadline.check("a health round");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    mock.kill();
    let _restarted = support::procs::mock_on(port, &flags);
    let up = Instant::now();

    let deadline = Deadline::after(Duration::from_secs(5));
    while blocks_of(&debug_index(&c, &router.url).await, &url) != 0 {
        deadline.check("the old launch's blocks to leave the index within a few health intervals");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    eprintln!(
        "stale window after the mock's restart: {:.2} s (health interval {INTERVAL_SECS} s)",
        up.elapsed().as_secs_f64()
    );
    let workers = workers_as(&router.url, ADMIN).await;
    assert_eq!(workers["workers"][0]["incarnation"], 1, "{workers}");
}
