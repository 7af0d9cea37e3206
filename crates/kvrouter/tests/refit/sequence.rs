//! The full miles refit sequence through the router under continuous load (loadgen plus a
//! probe that records each response's `meta_info.weight_version`): pause(wait) -> flush ->
//! init group -> update weights -> update version -> continue. Nothing fails or is lost,
//! nothing is served mid-update, the cache hook fires before the flush answers, and the
//! versions agree afterwards.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion
#![allow(clippy::disallowed_methods)] // fixtures spawn their own tasks; `Tasks` is the router's

use crate::support;

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use serde_json::json;

use kvrouter::refit::ClearReason;
use kvrouter_sim::loadgen::{self, CancellationToken, GrpoConfig, LoadgenConfig, Workload};
use support::http::{get, post};
use support::procs::mock;
use support::refit::{generate, in_process_router, refit_state};
use support::wait::wait_for;

#[derive(Debug, Clone)]
struct Probe {
    start: Instant,
    end: Instant,
    status: u16,
    version: Option<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn miles_sequence_with_router_drain_loses_nothing() {
    miles_sequence_under_load("wait").await;
}

/// miles' default: the engines retract running requests (recomputed after continue).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn miles_sequence_with_retract_loses_nothing() {
    miles_sequence_under_load("retract").await;
}

async fn miles_sequence_under_load(mode: &str) {
    let a = mock(&[
        "--speedup",
        "20",
        "--weight-version",
        "v1",
        "--tp-size",
        "2",
    ]);
    let b = mock(&["--speedup", "20", "--weight-version", "v1"]);
    let r = in_process_router(&[&a.url, &b.url], &["--mode", "round_robin"]).await;
    let url = r.url.clone();

    // Continuous load: loadgen (GRPO groups) plus a sequential probe reading versions.
    let mut cfg = LoadgenConfig::new(
        vec![url.clone()],
        Workload::Grpo(GrpoConfig {
            groups: 1_000_000,
            samples: 4,
            prompt_len: 256,
            system_prefix_len: 64,
            groups_in_flight: 2,
        }),
    );
    cfg.max_new_tokens = Some(16);
    cfg.concurrency = 8;
    cfg.max_duration_secs = 120.0;
    let stop_load = CancellationToken::new();
    let load_started = Instant::now();
    let load = tokio::spawn(loadgen::run_until(cfg, stop_load.clone()));
    let stop_probe = CancellationToken::new();
    let probes: Arc<Mutex<Vec<Probe>>> = Arc::default();
    let probe = tokio::spawn({
        let (url, stop, probes) = (url.clone(), stop_probe.clone(), probes.clone());
        async move {
            while !stop.is_cancelled() {
                let start = Instant::now();
                let (status, _, version) = generate(&url, None, 8).await;
                probes.lock().push(Probe {
                    start,
                    end: Instant::now(),
                    status,
                    version,
                });
            }
        }
    });
    // Let traffic flow before the refit.
    wait_for("probe traffic before the refit", || {
        let p = probes.clone();
        async move { p.lock().len() >= 5 }
    })
    .await;

    let pause_started = Instant::now();
    let (s, v) = post(&url, "/pause_generation", json!({"mode": mode})).await;
    let pause_done = Instant::now();
    // A request that arrives while the gate is closed must wait for continue, then be served.
    let held = tokio::spawn({
        let url = url.clone();
        async move {
            let reply = post(
                &url,
                "/generate",
                json!({"input_ids": [1, 2, 3, 4, 5], "sampling_params": {"max_new_tokens": 2}}),
            )
            .await;
            (reply, Instant::now())
        }
    });
    assert_eq!(s, 200, "pause: {v}");
    let st = refit_state(&url).await;
    assert_eq!(st["gate"]["closed"], true, "{st}");
    if mode == "wait" {
        assert!(
            st["workers"]
                .as_array()
                .expect("workers")
                .iter()
                .all(|w| w["in_flight"] == 0),
            "drained: {st}"
        );
    }

    let (s, v) = post(&url, "/flush_cache", json!({})).await;
    assert_eq!(s, 200, "flush: {v}");
    let flushed = Instant::now();
    {
        // The hook ran before the flush answered: the KV index is already empty.
        let ev = r.recorder.events.lock();
        let cleared: Vec<_> = ev
            .iter()
            .filter(|(t, e)| *t <= flushed && e.reason == ClearReason::Flush)
            .map(|(_, e)| e.url.clone())
            .collect();
        assert_eq!(cleared.len(), 2, "both workers cleared: {cleared:?}");
        assert!(cleared.contains(&a.url) && cleared.contains(&b.url));
    }

    let (s, v) = post(
        &url,
        "/init_weights_update_group",
        json!({"master_address": "127.0.0.1", "master_port": 29500, "rank_offset": 1,
               "world_size": 4, "group_name": "g", "backend": "nccl"}),
    )
    .await;
    assert_eq!(s, 200, "init group: {v}");
    let ranks = v["rank_assignment"]["ranks"].as_array().expect("ranks");
    assert_eq!(ranks.len(), 2);
    assert_eq!(
        (ranks[0]["url"].as_str(), ranks[0]["rank_offset"].as_u64()),
        (Some(a.url.as_str()), Some(1))
    );
    assert_eq!(ranks[0]["gpus"], 2, "tp_size 2 takes two ranks");
    assert_eq!(
        (ranks[1]["url"].as_str(), ranks[1]["rank_offset"].as_u64()),
        (Some(b.url.as_str()), Some(3))
    );

    let (s, v) = post(
        &url,
        "/update_weights_from_distributed",
        json!({"names": ["w"], "dtypes": ["bfloat16"], "shapes": [[4, 4]], "group_name": "g",
               "flush_cache": true, "weight_version": "v2"}),
    )
    .await;
    assert_eq!(s, 200, "update: {v}");
    let (s, v) = post(
        &url,
        "/update_weight_version",
        json!({"new_version": "v2", "abort_all_requests": false}),
    )
    .await;
    assert_eq!(s, 200, "version: {v}");
    let st = refit_state(&url).await;
    assert_eq!(
        (
            st["versions_agree"].as_bool(),
            st["weight_version"].as_str()
        ),
        (Some(true), Some("v2")),
        "{st}"
    );

    wait_for("a request held at the closed gate", || {
        let url = url.clone();
        async move { refit_state(&url).await["gate"]["queued"].as_u64() >= Some(1) }
    })
    .await;
    let continue_started = Instant::now();
    let (s, v) = post(&url, "/continue_generation", json!({})).await;
    assert_eq!(s, 200, "continue: {v}");
    let continue_done = Instant::now();
    assert_eq!(refit_state(&url).await["gate"]["closed"], false);
    assert!(
        r.recorder
            .events
            .lock()
            .iter()
            .any(|(_, e)| e.reason == ClearReason::WeightUpdate),
        "the flushing update fired the hook too"
    );

    // Keep probing a little after continue, then stop.
    let n = probes.lock().len();
    wait_for("probe traffic after the refit", || {
        let p = probes.clone();
        async move { p.lock().len() >= n + 5 }
    })
    .await;
    stop_probe.cancel();
    probe.await.expect("probe task");
    stop_load.cancel();
    let (summary, records) = load.await.expect("loadgen task").expect("loadgen run");

    use kvrouter_sim::loadgen::RequestStatus;
    let failed: Vec<_> = records
        .iter()
        .filter(|r| r.status == RequestStatus::Failed)
        .collect();
    assert!(failed.is_empty(), "loadgen requests failed: {failed:?}");
    assert_eq!(summary.requests.failed, 0);
    assert!(
        summary.requests.cancelled <= 8,
        "only requests in flight when the test stopped loadgen are unfinished: {}",
        summary.requests.cancelled
    );
    let ms = |t: Instant| t.duration_since(load_started).as_secs_f64() * 1e3;
    assert!(
        records.iter().any(|r| r.start_ms < ms(pause_started)),
        "load ran before the pause"
    );
    let ((held_status, held_body), held_done) = held.await.expect("held request task");
    assert_eq!(held_status, 200, "held request served: {held_body}");
    assert!(
        held_done > continue_started,
        "the request sent while paused was held at the gate until continue"
    );
    assert!(
        records
            .iter()
            .any(|r| r.is_ok() && r.start_ms > ms(continue_done)),
        "load ran after continue"
    );

    let probes = probes.lock().clone();
    assert!(
        probes.iter().all(|p| p.status == 200),
        "probe failures: {probes:?}"
    );
    let mut held = 0;
    for p in &probes {
        match p.version.as_deref() {
            Some("v1") => assert!(
                p.start < pause_done,
                "an old-version response started after the pause returned: {p:?}"
            ),
            Some("v2") => {
                assert!(
                    p.end >= continue_started,
                    "a new-version response ended before continue: {p:?}"
                );
                if p.start < continue_started {
                    held += 1;
                }
            }
            other => panic!("unexpected version {other:?}"),
        }
        assert!(
            !(p.start >= pause_done && p.end < continue_started),
            "a request was served while paused: {p:?}"
        );
    }
    assert!(
        held <= 1,
        "at most the one probe request waiting at the gate was held"
    );
    assert!(probes
        .iter()
        .any(|p| p.version.as_deref() == Some("v2") && p.start >= continue_done));

    // The workers agree too.
    for m in [&a, &b] {
        let (_, info) = get(&m.url, "/model_info").await;
        assert_eq!(info["weight_version"], "v2", "{}", m.url);
    }
}
