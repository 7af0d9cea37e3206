//! The `rollout` and `tenants` workloads end to end: the `loadgen` binary against a real
//! `sglang-mock --speedup 0` on an ephemeral loopback port, checking the summary JSON
//! (per-batch makespans, request counts) and the `--records` lines.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use kvrouter_sim::loadgen::workloads::tenants;
use kvrouter_sim::loadgen::TenantsConfig;
use serde_json::Value;

/// `sglang-mock` on an ephemeral port, killed on drop.
struct Mock {
    child: Child,
    url: String,
}

impl Mock {
    fn start() -> Mock {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sglang-mock"))
            .args(["--host", "127.0.0.1", "--port", "0", "--speedup", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start sglang-mock");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        // Readiness signal: `listening on URL` once it accepts connections.
        let url = loop {
            let line = lines.next().expect("mock exited before listening").unwrap();
            if let Some(url) = line.strip_prefix("listening on ") {
                break url.trim().to_string();
            }
        };
        Mock { child, url }
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs loadgen with `args` plus `--output json --records FILE`; the summary and records.
fn loadgen(url: &str, args: &[&str]) -> (Value, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["--url", url, "--output", "json", "--records"])
        .arg(&records)
        .args(args)
        .output()
        .expect("run loadgen");
    assert!(
        out.status.success(),
        "loadgen {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let lines = std::fs::read_to_string(&records).unwrap();
    let records = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (summary, records)
}

#[test]
fn rollout_reports_each_batch_and_keeps_the_barrier() {
    let mock = Mock::start();
    let (summary, records) = loadgen(
        &mock.url,
        &[
            "rollout",
            "--prompts",
            "3",
            "--samples",
            "4",
            "--batches",
            "2",
            "--prompt-len-min",
            "64",
            "--prompt-len-max",
            "128",
            "--output-len-median",
            "8",
            "--max-new-tokens",
            "32",
            "--concurrency",
            "5",
        ],
    );
    assert_eq!(summary["workload"], "rollout");
    assert_eq!(summary["requests"]["total"], 24);
    assert_eq!(summary["requests"]["ok"], 24);
    for key in ["ttft_ms", "e2e_ms"] {
        for p in ["p50", "p90", "p99", "mean", "max"] {
            assert!(summary[key][p].is_f64(), "{key}.{p}: {summary}");
        }
    }
    let batches = summary["batches"].as_array().unwrap();
    assert_eq!(batches.len(), 2);
    let mut total = 0.0;
    for b in batches {
        assert_eq!(b["requests"], 12);
        let m = b["makespan_secs"].as_f64().unwrap();
        assert!(m >= 0.0);
        total += m;
    }
    let makespan = &summary["makespan_secs"];
    assert!((makespan["total"].as_f64().unwrap() - total).abs() < 1e-9);
    assert!(makespan["mean"].is_f64() && makespan["max"].is_f64());

    assert_eq!(records.len(), 24);
    for r in &records {
        assert_eq!(r["ok"], true, "{r}");
        assert!(r["ttft_ms"].is_f64() && r["e2e_ms"].is_f64() && r["worker"].is_string());
        let len = r["prompt_len"].as_u64().unwrap();
        assert!((64..=128).contains(&len), "{r}");
        // ignore_eos: the mock generates exactly the drawn length, capped at 32.
        let out = r["completion_tokens"].as_u64().unwrap();
        assert!((1..=32).contains(&out), "{r}");
    }
    // Siblings carry the same prompt.
    let group: Vec<&Value> = records
        .iter()
        .filter(|r| r["tag"].as_str().unwrap().starts_with("b1/g2/"))
        .collect();
    assert_eq!(group.len(), 4);
    assert!(group
        .iter()
        .all(|r| r["prompt_len"] == group[0]["prompt_len"]));
    // Batch 1 starts after batch 0's last response.
    let end = |r: &Value| r["start_ms"].as_f64().unwrap() + r["e2e_ms"].as_f64().unwrap();
    let in_batch = |b: u64| records.iter().filter(move |r| r["batch"] == b);
    let last_end_0 = in_batch(0).map(end).fold(f64::MIN, f64::max);
    let first_start_1 = in_batch(1)
        .map(|r| r["start_ms"].as_f64().unwrap())
        .fold(f64::MAX, f64::min);
    assert!(
        last_end_0 <= first_start_1,
        "{last_end_0} > {first_start_1}"
    );
}

#[test]
fn tenants_arrive_on_the_simulated_clock_and_share_system_prompts() {
    let mock = Mock::start();
    // 40 arrivals at 20/s of simulated time ~ 2 simulated seconds, 20 ms of wall time.
    let (summary, records) = loadgen(
        &mock.url,
        &[
            "--sim-speedup",
            "100",
            "tenants",
            "--tenants",
            "4",
            "--system-len-min",
            "32",
            "--system-len-max",
            "64",
            "--suffix-len",
            "8",
            "--rate",
            "20",
            "--requests",
            "40",
            "--max-new-tokens",
            "4",
            "--routing-key",
        ],
    );
    assert_eq!(summary["workload"], "tenants");
    assert_eq!(summary["requests"]["total"], 40);
    assert_eq!(summary["requests"]["ok"], 40);
    assert!(summary.get("batches").is_none() && summary.get("makespan_secs").is_none());
    assert!(
        summary["prefix_hit_rate"].as_f64().unwrap() > 0.0,
        "{summary}"
    );
    assert_eq!(records.len(), 40);
    for r in &records {
        let len = r["prompt_len"].as_u64().unwrap();
        assert!((40..=72).contains(&len), "{r}");
        let key = r["routing_key"].as_str().unwrap();
        let tenant = r["tag"].as_str().unwrap().split('/').next().unwrap();
        assert_eq!(key, format!("tenant-{}", &tenant[3..]));
    }
    // scheduled_ms is the planned arrival in simulated time, not the (100x shorter) wall time.
    let cfg = TenantsConfig {
        tenants: 4,
        system_len_min: 32,
        system_len_max: 64,
        suffix_len: 8,
        rate: 20.0,
        requests: 40,
        routing_key: true,
        ..TenantsConfig::default()
    };
    let plan = tenants::plan(&cfg, 0);
    for r in &records {
        let k: usize = r["tag"]
            .as_str()
            .unwrap()
            .split("/r")
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let planned_ms = plan[k].0.as_secs_f64() * 1000.0;
        let scheduled = r["scheduled_ms"].as_f64().unwrap();
        assert!(
            (scheduled - planned_ms).abs() < 0.01,
            "{scheduled} vs {planned_ms}"
        );
    }
    let last_ms = plan[39].0.as_secs_f64() * 1000.0;
    assert!(
        last_ms > 500.0,
        "the plan spans simulated seconds ({last_ms} ms)"
    );
    assert!(summary["duration_secs"].as_f64().unwrap() * 1000.0 >= last_ms);
}
