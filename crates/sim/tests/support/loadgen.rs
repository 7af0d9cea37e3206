//! Loadgen helpers: read the mocks' own token counters and run the `loadgen` binary,
//! checking its summary against them.

use std::path::Path;

use kvrouter_sim::loadgen::Summary;

/// Sum of every series of counter `name` in a Prometheus text page.
pub fn metric_sum(page: &str, name: &str) -> u64 {
    page.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// (`sglang:cached_tokens_total`, `sglang:prompt_tokens_total`) of one mock.
pub async fn counters(url: &str) -> (u64, u64) {
    let page = super::http::client()
        .get(format!("{url}/metrics"))
        .send()
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

/// The per-worker label loadgen gives a mock reached directly among several URLs.
pub fn direct_label(url: &str) -> String {
    format!("direct@{}", url.trim_start_matches("http://"))
}

/// Runs the loadgen binary with `--url` = each of `targets` and `args`; checks the
/// table, that all `expected` requests succeeded, and that the summary's token
/// counts (total and per worker row, named by `label(mock url)`) equal the
/// `mocks`' own counter increments.
pub async fn run_and_compare(
    mocks: &[&str],
    targets: &[&str],
    label: impl Fn(&str) -> String,
    dir: &Path,
    args: &[&str],
    expected: u64,
) -> Summary {
    let mut before = Vec::new();
    for m in mocks {
        before.push(counters(m).await);
    }
    let json = dir.join("summary.json");
    let records = dir.join("records.jsonl");
    let mut cmd = tokio::process::Command::new(super::procs::sim_bin("loadgen"));
    for t in targets {
        cmd.args(["--url", t]);
    }
    let out = cmd
        .args(["--seed", "3", "--max-duration-secs", "120"])
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

    let (mut cached, mut prompt) = (0, 0);
    for (m, (c0, p0)) in mocks.iter().zip(before) {
        let (c1, p1) = counters(m).await;
        let (dc, dp) = (c1 - c0, p1 - p0);
        cached += dc;
        prompt += dp;
        match summary.per_worker.iter().find(|w| w.worker == label(m)) {
            Some(w) => assert_eq!(
                (w.cached_tokens, w.prompt_tokens),
                (dc, dp),
                "{m}\n{stdout}"
            ),
            None => assert_eq!(
                dp, 0,
                "no row for {m} although it served requests:\n{stdout}"
            ),
        }
    }
    assert_eq!(summary.tokens.prompt_reported, prompt, "{args:?}\n{stdout}");
    assert_eq!(summary.tokens.cached, cached, "{args:?}\n{stdout}");
    // The ratio went through JSON: serde_json's default float parser may be
    // one ulp off, so compare within a tolerance far below any real error.
    let want = cached as f64 / prompt as f64;
    let got = summary
        .prefix_hit_rate
        .expect("hit rate with prompt tokens");
    assert!(
        (got - want).abs() < 1e-12,
        "hit rate {got} vs {want}\n{stdout}"
    );
    summary
}
