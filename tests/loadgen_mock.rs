//! `loadgen grpo|agent|trace` (the binary) against 2 `sglang-mock` processes:
//! it prints the summary table, every request succeeds, and its hit rate and
//! per-worker token counts agree with the mocks' own `sglang:*_tokens_total`.

mod support;

use std::path::Path;

use kvrouter::sim::loadgen::Summary;
use support::{mock, Proc};

/// Sum of every series of counter `name` in a Prometheus text page.
fn metric_sum(page: &str, name: &str) -> u64 {
    page.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// (`sglang:cached_tokens_total`, `sglang:prompt_tokens_total`) of one mock.
async fn counters(url: &str) -> (u64, u64) {
    let page = reqwest::get(format!("{url}/metrics"))
        .await
        .and_then(|r| r.error_for_status())
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics body");
    (
        metric_sum(&page, "sglang:cached_tokens_total"),
        metric_sum(&page, "sglang:prompt_tokens_total"),
    )
}

fn two_mocks() -> (Proc, Proc) {
    let args = ["--speedup", "0", "--page-size", "16"];
    (mock(&args), mock(&args))
}

fn label(url: &str) -> String {
    format!("direct@{}", url.trim_start_matches("http://"))
}

/// Runs the loadgen binary against both mocks with `args`, checks the table and
/// that all `expected` requests succeeded, and compares token counts with the mocks.
async fn run_and_compare(
    mocks: &(Proc, Proc),
    dir: &Path,
    args: &[&str],
    expected: u64,
) -> Summary {
    let (a, b) = (&mocks.0.url, &mocks.1.url);
    let before = [counters(a).await, counters(b).await];
    let json = dir.join("summary.json");
    let records = dir.join("records.jsonl");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args([
            "--url",
            a,
            "--url",
            b,
            "--seed",
            "3",
            "--max-duration-secs",
            "120",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--records")
        .arg(&records)
        .args(args)
        .output()
        .await
        .expect("run loadgen");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "loadgen {args:?} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "requests ",
        "TTFT",
        "end-to-end",
        "throughput",
        "prefix hit rate",
    ] {
        assert!(stdout.contains(line), "table lacks {line:?}:\n{stdout}");
    }
    let summary: Summary =
        serde_json::from_slice(&std::fs::read(&json).expect("summary json")).expect("summary");
    assert_eq!(
        (summary.requests.total, summary.requests.ok),
        (expected, expected),
        "{args:?}: {:?}\n{stdout}",
        summary.errors
    );
    let lines = std::fs::read_to_string(&records).expect("records");
    assert_eq!(lines.lines().count() as u64, expected);

    let after = [counters(a).await, counters(b).await];
    let delta: Vec<(u64, u64)> = (0..2)
        .map(|i| (after[i].0 - before[i].0, after[i].1 - before[i].1))
        .collect();
    let (cached, prompt) = (delta[0].0 + delta[1].0, delta[0].1 + delta[1].1);
    assert_eq!(summary.tokens.prompt_reported, prompt, "{args:?}\n{stdout}");
    assert_eq!(summary.tokens.cached, cached, "{args:?}\n{stdout}");
    assert_eq!(summary.prefix_hit_rate, Some(cached as f64 / prompt as f64));
    for (url, (cached, prompt)) in [a, b].into_iter().zip(delta) {
        let row = summary.per_worker.iter().find(|w| w.worker == label(url));
        match row {
            Some(w) => assert_eq!(
                (w.cached_tokens, w.prompt_tokens),
                (cached, prompt),
                "{url}\n{stdout}"
            ),
            None => assert_eq!(
                prompt, 0,
                "no row for {url} although it served requests:\n{stdout}"
            ),
        }
    }
    summary
}

#[tokio::test]
async fn grpo_against_two_mocks() {
    let mocks = two_mocks();
    let dir = tempfile::tempdir().unwrap();
    let grpo = [
        "grpo",
        "--groups",
        "4",
        "--samples",
        "4",
        "--prompt-len",
        "200",
        "--system-prefix-len",
        "64",
        "--groups-in-flight",
        "2",
        "--max-new-tokens",
        "8",
    ];
    let s = run_and_compare(&mocks, dir.path(), &grpo, 16).await;
    assert!(s.tokens.cached > 0, "the shared system prefix is reused");
    let mut streamed = grpo.to_vec();
    streamed.push("--stream");
    let s = run_and_compare(&mocks, dir.path(), &streamed, 16).await;
    assert_eq!(s.tokens.completion, 16 * 8);
}

#[tokio::test]
async fn agent_against_two_mocks() {
    let mocks = two_mocks();
    let dir = tempfile::tempdir().unwrap();
    let agent = [
        "agent",
        "--sessions",
        "4",
        "--turns",
        "3",
        "--system-prefix-len",
        "64",
        "--first-prompt-len",
        "32",
        "--tool-output-len",
        "16",
        "--max-new-tokens",
        "8",
        "--url-pick",
        "sticky",
    ];
    let s = run_and_compare(&mocks, dir.path(), &agent, 12).await;
    // Sticky sessions: every later turn finds its earlier context on its worker.
    let min_hit = (2 * 4 * 96) as f64 / s.tokens.prompt_reported as f64;
    assert!(s.prefix_hit_rate.unwrap() >= min_hit, "{s:?}");
    for extra in [&["--stream"][..], &["--endpoint", "generate"][..]] {
        let mut args = agent.to_vec();
        args.extend_from_slice(extra);
        run_and_compare(&mocks, dir.path(), &args, 12).await;
    }
}

#[tokio::test]
async fn trace_against_two_mocks() {
    let mocks = two_mocks();
    let dir = tempfile::tempdir().unwrap();
    // 24 requests in 4 conversations: each turn extends its conversation's blocks.
    let mut trace = String::new();
    for turn in 0..6u64 {
        for conv in 0..4u64 {
            let ids: Vec<String> = (0..=turn + 1)
                .map(|b| (conv * 100 + b).to_string())
                .collect();
            let input = (turn + 2) * 16 - 5;
            trace.push_str(&format!(
                "{{\"timestamp\": {}, \"input_length\": {input}, \"output_length\": {}, \"hash_ids\": [{}]}}\n",
                turn * 1000 + conv * 10,
                4 + conv,
                ids.join(", ")
            ));
        }
    }
    let file = dir.path().join("trace.jsonl");
    std::fs::write(&file, trace).unwrap();
    let file = file.to_str().unwrap();
    let args = [
        "trace",
        "--file",
        file,
        "--trace-block-size",
        "16",
        "--time-scale",
        "0.001",
        "--url-pick",
        "sticky",
    ];
    let s = run_and_compare(&mocks, dir.path(), &args, 24).await;
    assert!(
        s.tokens.cached > 0,
        "conversations reuse their earlier blocks"
    );
    let limited = [&args[..], &["--max-requests", "5"]].concat();
    run_and_compare(&mocks, dir.path(), &limited, 5).await;
}
