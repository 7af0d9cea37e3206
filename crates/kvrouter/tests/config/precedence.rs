//! Configuration of the `router` binary: flags, environment and TOML file precedence, and
//! start-up failures that name the offending field.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use std::process::Command;

use support::http::client;
use support::procs::*;

fn run_expect_failure(args: &[&str], envs: &[(&str, &str)]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_router"))
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .expect("run router");
    assert!(!out.status.success(), "router accepted {args:?} {envs:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn invalid_configuration_fails_naming_the_field() {
    let err = run_expect_failure(&["--page-size", "0"], &[]);
    assert!(err.contains("page_size"), "{err}");
    let err = run_expect_failure(&["--mode", "fastest"], &[]);
    assert!(err.contains("mode"), "{err}");
    let err = run_expect_failure(&["--worker-urls", "ftp://x"], &[]);
    assert!(err.contains("worker_urls"), "{err}");
    let err = run_expect_failure(&[], &[("KVROUTER_HEALTH_FAILURE_THRESHOLD", "0")]);
    assert!(err.contains("health_failure_threshold"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("router.toml");
    std::fs::write(&file, "page_size = 16\nretry_max_retires = 3\n").unwrap();
    let err = run_expect_failure(&["--config", file.to_str().unwrap()], &[]);
    assert!(err.contains("retry_max_retires"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_beats_env_beats_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("router.toml");
    std::fs::write(
        &file,
        "mode = \"random\"\npage_size = 64\nsticky_ttl_secs = 5.0\n",
    )
    .unwrap();
    // The file says page 64 and random; env says page 32; the CLI says round-robin.
    let r = start_router_env(
        &["--config", file.to_str().unwrap(), "--mode", "round-robin"],
        &[("KVROUTER_PAGE_SIZE", "32")],
    );
    let v: serde_json::Value = client()
        .get(format!("{}/get_server_info", r.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["router"]["page_size"], 32, "{v}");
    assert_eq!(v["router"]["mode"], "round-robin", "{v}");
}
