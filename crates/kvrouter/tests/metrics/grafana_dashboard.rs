//! The Grafana dashboard `deploy/grafana/kvrouter.json`: its shape (data-source and worker
//! variables, every panel on `${datasource}`) and that every metric its PromQL names is one
//! real routers export at `GET /metrics` once requests, KV events, a retry and a refit call
//! have gone through them (histograms by their `_bucket`/`_sum`/`_count` series).
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use std::collections::BTreeSet;

use futures::StreamExt;
use serde_json::{json, Value};
use support::http::client;
use support::kv::*;
use support::procs::*;
use support::stub::*;

const DASHBOARD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/grafana/kvrouter.json"
);

/// Labelled families this test cannot make appear (no child until a replay, an undecodable
/// payload or an ignored event): checked against the names registered in `src/**/metrics.rs` (and the index crate's).
const NOT_DRIVEN: &[&str] = &[
    "kvrouter_kv_event_replays_total",
    "kvrouter_kv_event_decode_errors_total",
    "kvrouter_kv_events_ignored_total",
];

/// Every `kvrouter_*` identifier in `expr`.
fn metric_names(expr: &str) -> Vec<String> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("kvrouter_") {
        let starts_word = rest[..i].chars().next_back().is_none_or(|c| !is_ident(c));
        let end = rest[i..]
            .find(|c| !is_ident(c))
            .map_or(rest.len(), |e| i + e);
        if starts_word {
            out.push(rest[i..end].to_string());
        }
        rest = &rest[end..];
    }
    out
}

/// Every PromQL string of the dashboard: panel `expr`s and variable queries.
fn queries(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr" | "query" | "definition", Value::String(s)) => out.push(s.clone()),
                    _ => queries(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| queries(x, out)),
        _ => {}
    }
}

/// Sample names (`name` of `name{...} value` lines) of a Prometheus text exposition.
fn sample_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// The metric names registered in the router's sources (`"kvrouter_..."` literals of every
/// `metrics.rs` under `src/` and under the index crate's `src/`).
fn source_names() -> BTreeSet<String> {
    fn walk(dir: &std::path::Path, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.file_name().is_some_and(|n| n == "metrics.rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                for piece in text.split('"').skip(1).step_by(2) {
                    if piece.starts_with("kvrouter_") && metric_names(piece) == [piece] {
                        out.insert(piece.to_string());
                    }
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    for dir in ["src", "../index/src"] {
        walk(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir),
            &mut out,
        );
    }
    out
}

async fn metrics_text(c: &reqwest::Client, router: &str) -> String {
    let resp = c.get(format!("{router}/metrics")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.text().await.unwrap()
}

async fn post_ok(c: &reqwest::Client, url: String, body: Value, key: Option<&str>) -> String {
    let mut req = c.post(&url).json(&body);
    if let Some(k) = key {
        req = req.header("X-SMG-Routing-Key", k);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200, "POST {url}");
    // Read the whole body (streams included) so the request is observed end to end.
    let mut all = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        all.extend_from_slice(&chunk.unwrap());
    }
    String::from_utf8(all).unwrap()
}

/// `/metrics` of a KV-mode router after KV events, KV-routed requests (token ids, text,
/// sticky key, streaming) and a `/flush_cache`.
async fn kv_router_metrics() -> String {
    let pair = warm_kv_pair(&[]).await;
    let (router, c) = (&pair.router, pair.c.clone());
    let gen = format!("{}/generate", router.url);
    let ids = prompt(1, 64);
    for _ in 0..3 {
        let body = json!({"input_ids": ids, "sampling_params": {"max_new_tokens": 2}});
        post_ok(&c, gen.clone(), body, None).await;
    }
    for _ in 0..2 {
        let body = json!({"input_ids": prompt(2, 32), "sampling_params": {"max_new_tokens": 2}});
        post_ok(&c, gen.clone(), body, Some("session-1")).await;
    }
    let body = json!({"text": "no token ids", "sampling_params": {"max_new_tokens": 2}});
    post_ok(&c, gen.clone(), body, None).await;
    let body = json!({"input_ids": prompt(3, 32), "stream": true,
        "sampling_params": {"max_new_tokens": 4}});
    let sse = post_ok(&c, gen.clone(), body, None).await;
    assert!(sse.contains("data:"), "{sse}");
    let resp = c
        .post(format!("{}/flush_cache", router.url))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // Index gauges are refreshed every 500 ms.
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    metrics_text(&c, &router.url).await
}

/// `/metrics` of a round-robin router whose first worker answers 503 (a retry and an
/// upstream failure).
async fn retry_router_metrics() -> String {
    let stub = Stub::start(Behaviour::Status(503)).await;
    let m = fast_mock();
    let router = router_with(&[&stub.url, &m.url], &["--mode", "round-robin"]).await;
    let c = client();
    for _ in 0..4 {
        let body = json!({"text": "hi", "sampling_params": {"max_new_tokens": 1}});
        post_ok(&c, format!("{}/generate", router.url), body, None).await;
    }
    let text = metrics_text(&c, &router.url).await;
    assert!(text.contains("kvrouter_retries_total{"), "{text}");
    text
}

#[test]
fn dashboard_has_datasource_and_worker_variables() {
    let d: Value = serde_json::from_str(&std::fs::read_to_string(DASHBOARD).unwrap()).unwrap();
    let vars = d["templating"]["list"].as_array().unwrap();
    let var = |name: &str| vars.iter().find(|v| v["name"] == name).unwrap();
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    assert_eq!(
        var("worker")["query"]["query"],
        "label_values(kvrouter_worker_healthy, worker)"
    );
    let panels = d["panels"].as_array().unwrap();
    let mut ids = BTreeSet::new();
    for p in panels {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "duplicate id: {p}");
        assert!(p["title"].as_str().is_some_and(|t| !t.is_empty()), "{p}");
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{}", p["title"]);
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{}", p["title"]);
            assert!(t["expr"].as_str().is_some_and(|e| !e.is_empty()));
        }
    }
    assert!(panels.iter().filter(|p| p["type"] == "row").count() >= 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_metric_is_exported_by_the_router() {
    let d: Value = serde_json::from_str(&std::fs::read_to_string(DASHBOARD).unwrap()).unwrap();
    let mut exprs = Vec::new();
    queries(&d, &mut exprs);
    assert!(exprs.len() >= 40, "only {} queries", exprs.len());
    let used: BTreeSet<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();

    let mut live = sample_names(&kv_router_metrics().await);
    live.extend(sample_names(&retry_router_metrics().await));
    let registered = source_names();
    for name in NOT_DRIVEN {
        assert!(registered.contains(*name), "{name} is not registered");
    }

    let mut missing = Vec::new();
    let mut checked_live = 0;
    for name in &used {
        if live.contains(name) {
            checked_live += 1;
        } else if !(NOT_DRIVEN.contains(&name.as_str()) && registered.contains(name)) {
            missing.push(name.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "the dashboard names metrics the router does not export (a histogram is queried \
         through _bucket, _sum or _count): {missing:?}"
    );
    assert!(
        checked_live >= 40,
        "only {checked_live} names checked live: {used:?}"
    );
}

#[test]
fn metric_names_are_extracted_whole() {
    assert_eq!(
        metric_names(r#"sum(rate(kvrouter_a_total{x="kvrouter_b"}[5m])) / my_kvrouter_c"#),
        ["kvrouter_a_total", "kvrouter_b"]
    );
}
