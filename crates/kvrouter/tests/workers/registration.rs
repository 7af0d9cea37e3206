//! Worker registration against real `sglang-mock` processes: what the probe reads,
//! page-size refusal, idempotent re-registration, background registration jobs,
//! unreachable workers and the JSON views.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use std::time::Duration;

use kvrouter::workers::{
    AddWorkerError, HealthConfig, PageSizeRule, Registry, RegistryConfig, RegistryEvent, WorkerSpec,
};

/// A kv-mode registry whose periodic checks stay out of the way (tests drive checks themselves).
fn registry(page_size: u32) -> Registry {
    Registry::new(
        RegistryConfig {
            page_size: PageSizeRule::Folds { router: page_size },
            health: HealthConfig {
                interval: Duration::from_secs(3600),
                ..HealthConfig::default()
            },
            probe_timeout: Duration::from_secs(5),
            startup_timeout: Duration::from_secs(20),
            drain_timeout: Duration::from_secs(20),
            ..RegistryConfig::default()
        },
        &kvrouter::tasks::Tasks::new(),
    )
}

#[tokio::test]
async fn registration_reads_page_dp_tp_kv_events_and_version() {
    let zmq = support::procs::free_port_range(2);
    let kv = format!(r#"{{"publisher":"zmq","endpoint":"tcp://*:{zmq}","topic":"kv"}}"#);
    let mock = support::mock(&[
        "--page-size",
        "16",
        "--dp-size",
        "2",
        "--tp-size",
        "2",
        "--kv-events-config",
        &kv,
        "--weight-version",
        "w7",
        "--served-model-name",
        "served",
        "--max-total-tokens",
        "4096",
    ]);
    let reg = registry(16);
    let mut events = reg.subscribe();
    let id = reg
        .add_worker(&format!("{}/", mock.url), WorkerSpec::default())
        .await
        .expect("registered");
    let w = reg.get(id).expect("present");
    assert_eq!(w.url, mock.url, "trailing slash normalized away");
    assert_eq!(w.info.page_size, 16);
    assert_eq!(w.info.dp_size, 2);
    assert_eq!(w.info.tp_size, 2);
    assert_eq!(w.ranks(), 0..2);
    assert_eq!(w.info.max_total_num_tokens, Some(4096));
    assert_eq!(w.info.served_model_name.as_deref(), Some("served"));
    assert_eq!(w.weight_version().as_deref(), Some("w7"));
    let kv = w.info.kv_events.clone().expect("kv events config parsed");
    assert!(kv.is_enabled());
    assert_eq!(kv.topic, "kv");
    assert_eq!(
        kv.dial_endpoint(&w.host, 1),
        Some(format!("tcp://127.0.0.1:{}", zmq + 1))
    );
    assert!(w.is_routable());
    match events.recv().await.expect("an event") {
        RegistryEvent::Added(added) => assert_eq!(added.id, id),
        other => panic!("expected Added, got {other:?}"),
    }

    // Idempotent: same URL again gives the same id and no second worker.
    let again = reg
        .add_worker(&mock.url, WorkerSpec::default())
        .await
        .expect("idempotent");
    assert_eq!(again, id);
    assert_eq!(reg.snapshot().len(), 1);

    // Lookups by every key form.
    assert_eq!(reg.lookup(&w.public_id).map(|x| x.id), Some(id));
    assert_eq!(reg.lookup(&id.to_string()).map(|x| x.id), Some(id));
    assert_eq!(reg.lookup(&mock.url).map(|x| x.id), Some(id));
    assert!(reg.lookup("nope").is_none());

    // sgl-router shapes.
    let all = reg.workers_json();
    assert_eq!(all["total"], 1);
    assert_eq!(all["workers"][0]["id"], w.public_id.as_str());
    assert_eq!(all["workers"][0]["url"], mock.url.as_str());
    assert_eq!(all["workers"][0]["is_healthy"], true);
    assert_eq!(all["workers"][0]["load"], 0);
    assert_eq!(all["workers"][0]["dp_size"], 2);
    assert_eq!(reg.list_workers_json()["urls"][0], mock.url.as_str());
    assert_eq!(
        reg.worker_json(&w.public_id).expect("found")["url"],
        mock.url.as_str()
    );
}

#[tokio::test]
async fn page_size_mismatch_is_refused_naming_both_sizes() {
    // 24 does not divide 16: its pages cannot be folded into router blocks.
    let mock = support::mock(&["--page-size", "24"]);
    let reg = registry(16);
    let err = reg
        .add_worker(&mock.url, WorkerSpec::default())
        .await
        .expect_err("must refuse");
    match &err {
        AddWorkerError::PageSizeMismatch {
            worker_page_size,
            router_page_size,
            ..
        } => assert_eq!((*worker_page_size, *router_page_size), (24, 16)),
        other => panic!("expected PageSizeMismatch, got {other:?}"),
    }
    assert_eq!(err.status_code(), 400);
    let msg = err.to_string();
    assert!(
        msg.contains("page size 24") && msg.contains("--page-size 16"),
        "{msg}"
    );
    assert!(reg.snapshot().is_empty(), "never registered");
    // The failed registration stays visible for GET /workers/{url}.
    let job = reg.worker_json(&mock.url).expect("failed job listed");
    assert_eq!(job["job_status"]["status"], "failed");
    assert_eq!(reg.workers_json()["total"], 0);
    assert_eq!(
        reg.workers_json()["workers"].as_array().map(Vec::len),
        Some(0),
        "GET /workers lists registered workers only"
    );
}

#[tokio::test]
async fn background_registration_waits_for_warmup_then_adds() {
    let mock = support::mock(&["--page-size", "16", "--warmup-secs", "0.5"]);
    let reg = registry(16);
    let mut watch = reg.watch();
    let accepted = reg
        .start_add_worker(&mock.url, WorkerSpec::default())
        .expect("accepted");
    assert!(!accepted.existing);
    // While probing, a second add of the same URL is refused as pending (or, if the
    // probe already finished, answered idempotently).
    match reg.start_add_worker(&mock.url, WorkerSpec::default()) {
        Err(AddWorkerError::AlreadyPending { public_id, .. }) => {
            assert_eq!(public_id, accepted.public_id)
        }
        Ok(again) => assert!(again.existing && again.id == accepted.id),
        Err(other) => panic!("unexpected {other:?}"),
    }
    tokio::time::timeout(Duration::from_secs(30), watch.wait_for(|s| !s.is_empty()))
        .await
        .expect("registered in time")
        .expect("registry alive");
    let w = reg
        .get(accepted.id)
        .expect("registered under the accepted id");
    assert_eq!(w.public_id, accepted.public_id);
}

#[tokio::test]
async fn unreachable_worker_is_refused_after_startup_timeout() {
    let port = support::free_port();
    let reg = Registry::new(
        RegistryConfig {
            startup_timeout: Duration::from_millis(300),
            probe_timeout: Duration::from_millis(200),
            ..RegistryConfig::default()
        },
        &kvrouter::tasks::Tasks::new(),
    );
    let err = reg
        .add_worker(&format!("http://127.0.0.1:{port}"), WorkerSpec::default())
        .await
        .expect_err("nothing listens there");
    assert!(matches!(err, AddWorkerError::Unreachable { .. }), "{err:?}");
    assert_eq!(err.status_code(), 502);
}

#[tokio::test]
async fn api_key_is_sent_to_a_protected_worker() {
    let mock = support::mock(&["--page-size", "16", "--api-key", "sekret"]);
    let reg = Registry::new(
        RegistryConfig {
            startup_timeout: Duration::from_millis(500),
            ..RegistryConfig::default()
        },
        &kvrouter::tasks::Tasks::new(),
    );
    let refused = reg.add_worker(&mock.url, WorkerSpec::default()).await;
    assert!(refused.is_err(), "without the key the probe fails");
    let spec = WorkerSpec {
        api_key: Some("sekret".into()),
        ..WorkerSpec::default()
    };
    reg.add_worker(&mock.url, spec)
        .await
        .expect("with the key it registers");
}

#[tokio::test]
async fn a_worker_behind_the_fleet_version_awaits_refit_when_configured() {
    let a = support::mock(&["--page-size", "16", "--weight-version", "v2"]);
    let b = support::mock(&["--page-size", "16", "--weight-version", "v1"]);
    let reg = Registry::new(
        RegistryConfig {
            hold_version_mismatch: true,
            ..RegistryConfig::default()
        },
        &kvrouter::tasks::Tasks::new(),
    );
    let first = reg
        .add_worker(&a.url, WorkerSpec::default())
        .await
        .expect("a");
    let second = reg
        .add_worker(&b.url, WorkerSpec::default())
        .await
        .expect("b");
    assert_eq!(reg.fleet_weight_version().as_deref(), Some("v2"));
    let held = reg.get(second).expect("b registered");
    assert!(held.is_awaiting_refit() && !held.is_routable());
    let routable: Vec<_> = reg.routable().iter().map(|w| w.id).collect();
    assert_eq!(routable, vec![first]);
}
