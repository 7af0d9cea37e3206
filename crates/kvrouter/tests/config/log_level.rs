//! `--log-level warning` (Python's word, as miles passes it) logs warnings and nothing below:
//! the router is started with an ignored sgl-router flag (a warning at start), serves a request
//! (info and debug lines at lower levels) and then fails one on a dead worker (a warning). The
//! same run at `--log-level info` shows the info lines this test asserts are absent.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use kvrouter::config::compat::{warning, PEER_FLAGS};
use serde_json::json;
use support::captured::Captured;
use support::http::client;
use support::procs::fast_mock;

const LEVELS_BELOW_WARN: &[&str] = &[" INFO ", " DEBUG ", " TRACE "];

fn plain(line: &str) -> String {
    // Strip ANSI colour sequences (ESC [ ... m) so level words compare as text.
    let mut out = String::new();
    let mut chars = line.chars();
    while let Some(ch) = chars.next() {
        if ch == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(ch);
        }
    }
    out
}

/// Runs the scenario at `level` and returns the router's stderr, ANSI-stripped.
async fn run(level: &str) -> Vec<String> {
    let ignored = PEER_FLAGS
        .iter()
        .find(|i| i.flag == "cache-threshold")
        .unwrap();
    let mut mock = fast_mock();
    let mut r = Captured::start(&[
        "--log-level",
        level,
        "--mode",
        "round-robin",
        "--cache-threshold",
        "0.3",
        "--worker-urls",
        &mock.url,
        "--health-check-interval-secs",
        "60",
    ]);
    support::admin::wait_healthy_count(&r.url, 1).await;
    let c = client();
    let body = json!({"text": "hi", "sampling_params": {"max_new_tokens": 1}});
    let resp = c
        .post(format!("{}/generate", r.url))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    mock.kill();
    let resp = c
        .post(format!("{}/generate", r.url))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_ne!(resp.status().as_u16(), 200, "the worker is gone");
    let log: Vec<String> = r
        .stderr_until("upstream attempt failed")
        .iter()
        .map(|l| plain(l))
        .collect();
    let expected = warning(ignored);
    assert!(
        log.iter().any(|l| l.contains(&expected)),
        "{expected} in {log:#?}"
    );
    assert!(
        log.iter()
            .any(|l| l.contains(" WARN ") && l.contains("upstream attempt failed")),
        "the late warning in {log:#?}"
    );
    log
}

#[tokio::test]
async fn warning_logs_warnings_and_nothing_below() {
    let log = run("warning").await;
    let below: Vec<&String> = log
        .iter()
        .filter(|l| LEVELS_BELOW_WARN.iter().any(|lv| l.contains(lv)))
        .collect();
    assert!(
        below.is_empty(),
        "lines below WARN at --log-level warning: {below:#?}"
    );
}

#[tokio::test]
async fn info_shows_the_lines_warning_hides() {
    let log = run("info").await;
    assert!(log.iter().any(|l| l.contains(" INFO ")), "{log:#?}");
    assert!(!log.iter().any(|l| l.contains(" DEBUG ")), "{log:#?}");
}
