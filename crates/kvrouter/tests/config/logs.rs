//! The router's logs as a user running it under a supervisor sees them: written to a pipe they
//! carry no ANSI colour codes; `--log-level debug` writes one structured `request finished`
//! line per request (route, worker, status, duration; in KV mode prompt tokens and the
//! predicted and worker-reported prefix hits); an unknown `--log-level` word is a startup
//! error (exit 2) that lists the accepted words.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use support::captured::Captured;
use support::http::client;
use support::kv::{generate, kv_mock, prompt, PAGE};
use support::procs::fast_mock;

const LINE: &str = "request finished";

fn request_lines(log: &[String]) -> Vec<&String> {
    log.iter().filter(|l| l.contains(LINE)).collect()
}

#[tokio::test]
async fn debug_logs_one_plain_line_per_request() {
    let mock = fast_mock();
    let mut r = Captured::start(&[
        "--log-level",
        "debug",
        "--mode",
        "round-robin",
        "--worker-urls",
        &mock.url,
    ]);
    support::admin::wait_healthy_count(&r.url, 1).await;
    let c = client();
    let body = json!({"text": "hi", "sampling_params": {"max_new_tokens": 1}});
    for _ in 0..2 {
        assert_eq!(support::http::generate(&c, &r.url, &body).await.0, 200);
    }
    let log = r.stderr_until_count(LINE, 2).to_vec();
    let lines = request_lines(&log);
    assert_eq!(lines.len(), 2, "one line per request: {log:#?}");
    for l in &lines {
        for field in [
            "route=\"generate\"".to_string(),
            format!("worker=\"{}\"", mock.url),
            "status=200".to_string(),
            "duration_ms=".to_string(),
            "DEBUG".to_string(),
        ] {
            assert!(l.contains(&field), "{field} in {l}");
        }
    }
    let coloured: Vec<&String> = log.iter().filter(|l| l.contains('\u{1b}')).collect();
    assert!(
        coloured.is_empty(),
        "no ANSI codes on a pipe: {coloured:#?}"
    );
}

#[tokio::test]
async fn kv_mode_line_has_predicted_and_reported_hits() {
    let mock = kv_mock(&["--speedup", "0"]);
    let page = PAGE.to_string();
    let mut r = Captured::start(&[
        "--log-level",
        "debug",
        "--mode",
        "kv",
        "--page-size",
        &page,
        "--worker-urls",
        &mock.url,
    ]);
    support::admin::wait_healthy_count(&r.url, 1).await;
    let c = client();
    assert_eq!(generate(&c, &r.url, &prompt(3, 32), 2).await.0, 200);
    let log = r.stderr_until(LINE).to_vec();
    let lines = request_lines(&log);
    let l = lines.first().unwrap();
    for field in [
        "prompt_tokens=32",
        "predicted_hit_tokens=",
        "actual_hit_tokens=",
        "output_tokens=",
    ] {
        assert!(l.contains(field), "{field} in {l}");
    }
}

#[test]
fn an_unknown_level_is_a_startup_error() {
    let child = Command::new(env!("CARGO_BIN_EXE_router"))
        .args(["--host", "127.0.0.1", "--port", "0", "--log-level", "foo"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let pid = child.id();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let Ok(out) = rx.recv_timeout(Duration::from_secs(30)) else {
        let _ = Command::new("kill").arg(pid.to_string()).status();
        panic!("--log-level foo did not stop the router");
    };
    let out = out.unwrap();
    let status = out.status;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("unknown log level \"foo\""), "{err}");
    for accepted in ["debug", "info", "warn", "warning", "error", "critical"] {
        assert!(err.contains(accepted), "{accepted} listed in {err}");
    }
}
