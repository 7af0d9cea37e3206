//! `loadgen grpo|agent|trace` (the binary) against 2 `sglang-mock` processes:
//! it prints the summary table, every request succeeds, and its hit rate and
//! per-worker token counts agree with the mocks' own `sglang:*_tokens_total`.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use std::path::Path;

use kvrouter_sim::loadgen::Summary;
use support::loadgen::{direct_label, run_and_compare};
use support::{mock, Proc};

fn two_mocks() -> (Proc, Proc) {
    let args = ["--speedup", "0", "--page-size", "16"];
    (mock(&args), mock(&args))
}

/// Runs loadgen straight at both mocks (client-side spreading).
async fn direct(mocks: &(Proc, Proc), dir: &Path, args: &[&str], expected: u64) -> Summary {
    let urls = [mocks.0.url.as_str(), mocks.1.url.as_str()];
    run_and_compare(&urls, &urls, direct_label, dir, args, expected).await
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
    let s = direct(&mocks, dir.path(), &grpo, 16).await;
    assert!(s.tokens.cached > 0, "the shared system prefix is reused");
    let mut streamed = grpo.to_vec();
    streamed.push("--stream");
    let s = direct(&mocks, dir.path(), &streamed, 16).await;
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
    let s = direct(&mocks, dir.path(), &agent, 12).await;
    // Sticky sessions: every later turn finds its earlier context on its worker.
    let min_hit = (2 * 4 * 96) as f64 / s.tokens.prompt_reported as f64;
    assert!(s.prefix_hit_rate.unwrap() >= min_hit, "{s:?}");
    for extra in [&["--stream"][..], &["--endpoint", "generate"][..]] {
        let mut args = agent.to_vec();
        args.extend_from_slice(extra);
        direct(&mocks, dir.path(), &args, 12).await;
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
    let s = direct(&mocks, dir.path(), &args, 24).await;
    assert!(
        s.tokens.cached > 0,
        "conversations reuse their earlier blocks"
    );
    let limited = [&args[..], &["--max-requests", "5"]].concat();
    direct(&mocks, dir.path(), &limited, 5).await;
}
