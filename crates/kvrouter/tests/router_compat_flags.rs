//! sgl-router / SMG launch flags: miles' router command line starts `router` and serves
//! /generate, every accepted-and-ignored flag logs its one warning line, `--prometheus-port`
//! serves /metrics on a second port.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kvrouter::config::compat::{warning, Takes, IGNORED};
use serde_json::json;
use support::http::client;
use support::procs::*;

/// A `router` whose stdout and stderr are both captured (support::Proc inherits stderr).
struct Captured {
    child: Child,
    url: String,
    stderr: mpsc::Receiver<String>,
}

impl Drop for Captured {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lines(r: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Starts `router` with exactly `args` and waits for its `listening on URL` line.
fn spawn_captured(args: &[String]) -> Captured {
    let mut child = Command::new(env!("CARGO_BIN_EXE_router"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = lines(child.stdout.take().unwrap());
    let stderr = lines(child.stderr.take().unwrap());
    let url = loop {
        match stdout.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => {
                if let Some(url) = line.strip_prefix("listening on ") {
                    break url.trim().to_string();
                }
            }
            Err(e) => {
                let _ = child.kill();
                let err: Vec<String> = stderr.try_iter().collect();
                panic!("router {args:?} did not start: {e}\n{}", err.join("\n"));
            }
        }
    };
    Captured { child, url, stderr }
}

/// Collects stderr lines until every one of `wanted` has appeared (or 30 s pass).
fn stderr_until(r: &Captured, wanted: &[String]) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    while !wanted
        .iter()
        .all(|w| seen.iter().any(|l: &String| l.contains(w)))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match r.stderr.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => break,
        }
    }
    // Lines already printed by now (the warnings precede readiness) are all there.
    seen.extend(r.stderr.try_iter());
    seen
}

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
    let r = spawn_captured(&args);
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
    let err = stderr_until(
        &r,
        &["--policy consistent_hashing maps to --mode least-load".into()],
    );
    assert!(
        err.iter()
            .any(|l| l.contains("consistent_hashing maps to --mode least-load")),
        "{err:?}"
    );
}

#[test]
fn every_ignored_flag_logs_one_warning() {
    let mut args = strings(&["--host", "127.0.0.1", "--port", "0"]);
    for i in IGNORED {
        args.push(format!("--{}", i.flag));
        match i.takes {
            Takes::Nothing => {}
            Takes::One => args.push("-1".into()),
            Takes::Many => args.extend(strings(&["a", "b"])),
        }
    }
    let r = spawn_captured(&args);
    let wanted: Vec<String> = IGNORED.iter().map(warning).collect();
    let err = stderr_until(&r, &wanted);
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
