//! `loadgen` through the `router` in front of 2 `sglang-mock`s: per-worker rows are
//! named by the router's `x-kvrouter-worker` header, and every row's token counts
//! equal that mock's own counters.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use support::loadgen::run_and_compare;
use support::procs::{mock, router_with};

#[tokio::test]
async fn loadgen_through_the_router_attributes_workers_from_its_header() {
    let args = ["--speedup", "0", "--page-size", "16"];
    let (a, b) = (mock(&args), mock(&args));
    let urls = [a.url.as_str(), b.url.as_str()];
    let router = router_with(&urls, &["--mode", "round-robin", "--page-size", "16"]).await;
    let dir = tempfile::tempdir().unwrap();
    let by_url = |m: &str| m.to_string();
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
        "--max-new-tokens",
        "8",
    ];
    let s = run_and_compare(&urls, &[&router.url], by_url, dir.path(), &grpo, 16).await;
    let mut rows: Vec<&str> = s.per_worker.iter().map(|w| w.worker.as_str()).collect();
    rows.sort();
    let mut want = urls.to_vec();
    want.sort();
    assert_eq!(rows, want, "round-robin reaches both mocks");
    let agent = [
        "--stream",
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
    ];
    run_and_compare(&urls, &[&router.url], by_url, dir.path(), &agent, 12).await;
}
