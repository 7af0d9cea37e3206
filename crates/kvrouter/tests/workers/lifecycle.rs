//! Worker lifecycle against real `sglang-mock` processes: health transitions with
//! thresholds (kill -> unhealthy, restart on the same port -> healthy again with a
//! new incarnation), the periodic checker, passive failures, and draining removal.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion
#![allow(clippy::disallowed_methods)] // fixtures spawn their own tasks; `Tasks` is the router's

use crate::support;

use std::time::{Duration, Instant};

use kvrouter::workers::{
    HealthConfig, PageSizeRule, Registry, RegistryConfig, RegistryEvent, WorkerSpec,
};
use support::http::port_of;
use support::Proc;

fn registry(interval: Duration) -> Registry {
    Registry::new(
        RegistryConfig {
            page_size: PageSizeRule::Folds { router: 16 },
            health: HealthConfig {
                interval,
                timeout: Duration::from_secs(2),
                failure_threshold: 2,
                success_threshold: 2,
                ..HealthConfig::default()
            },
            probe_timeout: Duration::from_secs(5),
            startup_timeout: Duration::from_secs(20),
            drain_timeout: Duration::from_secs(30),
            ..RegistryConfig::default()
        },
        &kvrouter::tasks::Tasks::new(),
    )
}

/// Starts a mock on a fixed port (for restarts behind the same URL).
fn mock_on(port: u16, extra: &[&str]) -> Proc {
    let port = port.to_string();
    let mut args = vec!["--host", "127.0.0.1", "--port", &port, "--page-size", "16"];
    args.extend_from_slice(extra);
    Proc::spawn(&support::procs::sim_bin("sglang-mock"), &args)
}

/// Waits (bounded) for a condition the background checker will make true.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn kill_makes_unhealthy_after_threshold_and_restart_recovers() {
    let mut mock = support::mock(&["--page-size", "16", "--weight-version", "v1"]);
    let port = port_of(&mock.url);
    let reg = registry(Duration::from_secs(3600)); // checks driven by the test
    let mut events = reg.subscribe();
    let id = reg
        .add_worker(&mock.url, WorkerSpec::default())
        .await
        .expect("registered");
    let w = reg.get(id).expect("present");
    assert!(matches!(events.recv().await, Ok(RegistryEvent::Added(_))));

    reg.check_health_now().await;
    assert!(w.is_healthy());

    mock.kill();
    reg.check_health_now().await;
    assert!(w.is_healthy(), "one failure is below the threshold of 2");
    reg.check_health_now().await;
    assert!(!w.is_healthy(), "two consecutive failures");
    assert!(reg.routable().is_empty(), "unhealthy workers are skipped");
    assert_eq!(reg.snapshot().len(), 1, "but stay registered");

    // A new process on the same port, at another weight version.
    let _restarted = mock_on(port, &["--weight-version", "v2"]);
    reg.check_health_now().await;
    assert!(!w.is_healthy(), "one success is below the threshold of 2");
    assert_eq!(w.incarnation(), 1, "restart detected on the first answer");
    assert_eq!(w.weight_version().as_deref(), Some("v2"), "info re-read");
    match events.recv().await {
        Ok(RegistryEvent::Restarted(r)) => assert_eq!(r.id, id),
        other => panic!("expected Restarted, got {other:?}"),
    }
    reg.check_health_now().await;
    assert!(
        w.is_healthy() && w.is_routable(),
        "recovered after two successes"
    );
    assert_eq!(reg.routable().len(), 1);
}

#[tokio::test]
async fn periodic_checker_flips_health_both_ways() {
    let mock = support::mock(&["--page-size", "16"]);
    let mut cfg = registry(Duration::from_millis(50)).config().clone();
    cfg.health.poll_load = true;
    let reg = Registry::new(cfg, &kvrouter::tasks::Tasks::new());
    let id = reg
        .add_worker(&mock.url, WorkerSpec::default())
        .await
        .expect("registered");
    let w = reg.get(id).expect("present");

    eventually("load polled", || w.reported_load() == Some(0)).await;

    // Alive but failing (503): unhealthy, and no restart is assumed.
    let client = reqwest::Client::new();
    let set = |healthy: bool| {
        client
            .post(format!("{}/mock/set_health", mock.url))
            .json(&serde_json::json!({ "healthy": healthy }))
            .send()
    };
    assert!(set(false).await.expect("hook").status().is_success());
    eventually("unhealthy", || !w.is_healthy()).await;
    assert!(reg.routable().is_empty());
    assert!(set(true).await.expect("hook").status().is_success());
    eventually("healthy again", || w.is_healthy()).await;
    assert_eq!(w.incarnation(), 0, "a 503 is not a restart");
}

#[tokio::test]
async fn passive_failures_from_the_data_plane_count() {
    let mock = support::mock(&["--page-size", "16"]);
    let reg = registry(Duration::from_secs(3600));
    let id = reg
        .add_worker(&mock.url, WorkerSpec::default())
        .await
        .expect("registered");
    let w = reg.get(id).expect("present");
    w.record_failure();
    w.record_success(); // a 4xx/2xx resets the streak
    w.record_failure();
    assert!(w.is_healthy());
    w.record_failure();
    assert!(!w.is_healthy());
    // The periodic check (here run by hand) brings it back.
    reg.check_health_now().await;
    reg.check_health_now().await;
    assert!(w.is_healthy());
    assert_eq!(w.incarnation(), 0);
    // A refused connect seen by the proxy flags a possible restart; the next
    // successful check confirms it (new incarnation, info re-read).
    let mut events = reg.subscribe();
    w.record_connect_failure();
    reg.check_health_now().await;
    assert_eq!(w.incarnation(), 1);
    assert!(matches!(events.recv().await, Ok(RegistryEvent::Restarted(r)) if r.id == id));
}

#[tokio::test]
async fn removal_drains_in_flight_requests_first() {
    let mock = support::mock(&["--page-size", "16"]);
    let other = support::mock(&["--page-size", "16"]);
    let reg = registry(Duration::from_secs(3600));
    let id = reg
        .add_worker(&mock.url, WorkerSpec::default())
        .await
        .expect("registered");
    reg.add_worker(&other.url, WorkerSpec::default())
        .await
        .expect("registered");
    let w = reg.get(id).expect("present");
    let mut events = reg.subscribe();

    // Two requests are in flight (as the router's booking counts them).
    w.begin_request();
    w.begin_request();
    let removal = tokio::spawn({
        let reg = reg.clone();
        async move { reg.remove_by_id(id).await }
    });
    match events.recv().await {
        Ok(RegistryEvent::Draining(d)) => assert_eq!(d.id, id),
        other => panic!("expected Draining, got {other:?}"),
    }
    assert!(w.is_draining() && !w.is_routable(), "no new requests");
    assert_eq!(reg.routable().len(), 1, "the other worker still serves");
    assert!(reg.get(id).is_some(), "still registered while draining");
    assert!(
        reg.add_worker(&mock.url, WorkerSpec::default())
            .await
            .is_err(),
        "re-adding a draining URL is refused"
    );

    w.end_request();
    assert!(reg.get(id).is_some(), "one request still in flight");
    w.end_request();
    let removed = tokio::time::timeout(Duration::from_secs(10), removal)
        .await
        .expect("drain finished")
        .expect("task ok")
        .expect("was registered");
    assert_eq!(removed.id, id);
    assert!(reg.get(id).is_none());
    match events.recv().await {
        Ok(RegistryEvent::Removed(r)) => assert_eq!(r.id, id),
        other => panic!("expected Removed, got {other:?}"),
    }
    assert_eq!(
        reg.list_workers_json()["urls"].as_array().map(Vec::len),
        Some(1)
    );
    assert!(reg.remove_by_url(&mock.url).await.is_none(), "already gone");
}

#[tokio::test]
async fn removal_gives_up_waiting_after_the_drain_timeout() {
    let mock = support::mock(&["--page-size", "16"]);
    let reg = Registry::new(
        RegistryConfig {
            drain_timeout: Duration::from_millis(100),
            ..RegistryConfig::default()
        },
        &kvrouter::tasks::Tasks::new(),
    );
    let id = reg
        .add_worker(&mock.url, WorkerSpec::default())
        .await
        .expect("registered");
    let w = reg.get(id).expect("present");
    w.begin_request(); // never ends
    let removed = reg.remove_by_url(&mock.url).await.expect("was registered");
    assert_eq!(removed.in_flight(), 1);
    assert!(reg.snapshot().is_empty());
    removed.end_request(); // the straggler finishing later is harmless
    assert_eq!(removed.in_flight(), 0);
}
