//! sgl-router / SMG launch flags: miles' router command line starts `router` and serves
//! /generate, every accepted-and-ignored flag logs its one warning line, `--prometheus-port`
//! serves /metrics on a second port.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use std::process::Command;

use kvrouter::config::compat::{warning, Kind, Takes, PEER_FLAGS};
use serde_json::json;
use support::captured::Captured;
use support::http::client;
use support::procs::*;

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// miles `router_manager.start_router` with sgl-router: `RouterArgs` with its overrides
/// (host/port, a free `prometheus_port`, `log_level="warn"`, `request_timeout_secs=14400`,
/// `policy=--sglang-router-policy`), plus the recipe flags (deepseek-v4 health thresholds,
/// `--router-balance-abs-threshold 0`, `--router-dp-aware`, `--router-assignment-mode`) and
/// SMG's cache_aware defaults, as `launch_router` flags. Workers register afterwards with
/// `POST /workers {"url", "worker_type"}`, as miles' engines do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn miles_router_command_line_serves_generate() {
    let mock = fast_mock();
    let prometheus_port = free_port().to_string();
    let args = strings(&[
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--policy",
        "consistent_hashing",
        "--prometheus-port",
        &prometheus_port,
        "--log-level",
        "warn",
        "--request-timeout-secs",
        "14400",
        "--health-success-threshold",
        "1",
        "--health-check-interval-secs",
        "15",
        "--health-failure-threshold",
        "40",
        "--balance-abs-threshold",
        "0",
        "--balance-rel-threshold",
        "1.5",
        "--cache-threshold",
        "0.3",
        "--dp-aware",
        "--assignment-mode",
        "min_load",
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut r = Captured::start_exact(&args);
    let c = client();
    let resp = c
        .post(format!("{}/workers", r.url))
        .json(&json!({"url": mock.url, "worker_type": "regular"}))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    support::admin::wait_healthy_count(&r.url, 1).await;
    let resp = c
        .post(format!("{}/generate", r.url))
        .header("X-SMG-Routing-Key", "session-1")
        .json(&json!({"input_ids": [1, 2, 3, 4], "sampling_params": {"max_new_tokens": 4}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(
        body.get("text").is_some() || body.get("output_ids").is_some(),
        "{body}"
    );
    let err = r.stderr_until("--policy consistent_hashing maps to --mode least-load");
    assert!(
        err.iter()
            .any(|l| l.contains("consistent_hashing maps to --mode least-load")),
        "{err:?}"
    );
}

#[test]
fn every_ignored_flag_logs_one_warning() {
    let ignored: Vec<_> = PEER_FLAGS
        .iter()
        .filter(|p| matches!(p.kind, Kind::Ignored(_)))
        .collect();
    let mut args = strings(&["--host", "127.0.0.1", "--port", "0"]);
    for i in &ignored {
        args.push(format!("--{}", i.flag));
        match i.takes {
            Takes::Nothing => {}
            Takes::One => args.push("-1".into()),
            Takes::Many | Takes::Any => args.extend(strings(&["a", "b"])),
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut r = Captured::start_exact(&args);
    let wanted: Vec<String> = ignored.iter().map(|i| warning(i)).collect();
    let wanted_str: Vec<&str> = wanted.iter().map(String::as_str).collect();
    let err = r.stderr_until_all(&wanted_str);
    for w in &wanted {
        let n = err.iter().filter(|l| l.contains(w.as_str())).count();
        assert_eq!(n, 1, "{w:?} logged {n} times in {err:#?}");
    }
}

#[test]
fn policy_and_mode_that_disagree_fail() {
    let out = Command::new(env!("CARGO_BIN_EXE_router"))
        .args(["--mode", "kv", "--policy", "round_robin"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--policy round_robin") && err.contains("--mode kv"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_port_serves_metrics() {
    let port = free_port();
    let r = start_router(&["--prometheus-port", &port.to_string()]);
    let c = client();
    let base = format!("http://127.0.0.1:{port}");
    // The second listener is bound before the readiness line.
    let resp = c.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().await.unwrap();
    assert!(text.contains("kvrouter_"), "{text}");
    let resp = c.get(format!("{base}/generate")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let main = c.get(format!("{}/metrics", r.url)).send().await.unwrap();
    assert_eq!(main.status().as_u16(), 200);
}
