//! The `loadgen` binary's contract without a server: exit codes, error messages
//! and `--output json`.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use std::process::Command;

use kvrouter_sim::loadgen::Summary;

fn loadgen(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(args)
        .output()
        .expect("run loadgen")
}

fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

#[test]
fn nothing_succeeded_exits_3_with_the_table_and_the_errors() {
    let url = dead_url();
    let out = loadgen(&["--url", &url, "grpo", "--groups", "1", "--samples", "2"]);
    assert_eq!(out.status.code(), Some(3));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("2 total, 0 ok, 2 failed"), "{stdout}");
    assert!(stdout.contains("transport"), "{stdout}");
}

#[test]
fn output_json_prints_the_summary() {
    let url = dead_url();
    let out = loadgen(&[
        "--output",
        "json",
        "--url",
        &url,
        "agent",
        "--sessions",
        "2",
    ]);
    assert_eq!(out.status.code(), Some(3));
    let summary: Summary = serde_json::from_slice(&out.stdout).expect("JSON summary on stdout");
    assert_eq!(summary.workload, "agent");
    assert_eq!(summary.endpoint, "chat");
    // A failed first turn ends the session: one request per session.
    assert_eq!(summary.requests.failed, 2);
}

#[test]
fn bad_configuration_exits_1_naming_the_problem() {
    let out = loadgen(&["--url", "http://192.0.2.1:80", "grpo"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a loopback address"));
    let out = loadgen(&["grpo", "--samples", "0"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("samples must be greater than 0"));
    let out = loadgen(&["trace", "--file", "/nonexistent.jsonl"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open trace /nonexistent.jsonl"));
}
