//! Smoke run of the README's main command (`loadgen demo`) with a tiny workload: the
//! embedded fleet, router and workloads run end to end and every request succeeds.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use std::process::Command;

#[test]
fn tiny_demo_runs_every_mode_without_failures() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("demo.json");
    let out = Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args([
            "demo",
            "--tiny",
            "--modes",
            "kv,least-load,round-robin",
            "--json",
        ])
        .arg(&json)
        .output()
        .expect("run loadgen demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for mode in ["kv", "least-load", "round-robin"] {
        assert!(stdout.contains(mode), "table lacks {mode}:\n{stdout}");
    }
    let rows: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("demo json")).expect("valid json");
    let rows = rows.as_array().expect("array of rows");
    assert_eq!(rows.len(), 6, "3 modes x 2 workloads");
    for r in rows {
        let s = &r["summary"];
        assert_eq!(s["requests"]["failed"], 0, "{r}");
        assert!(s["requests"]["ok"].as_u64().unwrap_or(0) > 0, "{r}");
        assert!(s["prefix_hit_rate"].as_f64().unwrap_or(0.0) > 0.0, "{r}");
    }
}
