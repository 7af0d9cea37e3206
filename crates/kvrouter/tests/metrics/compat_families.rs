//! Every metric family the sgl-router / SMG dashboards and alerts query (the `served` rows of
//! `tests/data/metrics_compat_families.tsv`, taken from the peers' sources, docs dashboards,
//! alert rules and Helm chart) is on `/metrics` of a real router under `--metrics-compat
//! smg` / `sgl-router`, with the peer's type and exactly its label names, and every `model`
//! label names the model the workers serve (never `unknown`). Traffic: a KV fleet (cache
//! hits, tokens, streamed TTFT, chat), a round-robin fleet whose 503 worker is retried away (and a
//! body that is not JSON),
//! and two 503 workers with no retry allowed (retries exhausted, worker errors).
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;
use support::http::{client, get_text, post_json};
use support::kv::{generate, prompt, warm_kv_pair};
use support::procs::{fast_mock, router_with};
use support::stub::{Behaviour, Stub};

const FAMILIES: &str = include_str!("../data/metrics_compat_families.tsv");

/// The models the test workers serve: the mocks' default `model_path`, the stub's name.
const MODELS: &[&str] = &["mock-model", "stub"];

struct Family {
    name: String,
    kind: String,
    labels: BTreeSet<String>,
}

fn served(flavor: &str) -> Vec<Family> {
    FAMILIES
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .filter(|c| c[0] == flavor && c[4] == "served")
        .map(|c| Family {
            name: c[1].to_string(),
            kind: c[2].to_string(),
            labels: c[3]
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
        })
        .collect()
}

/// One scrape: `# TYPE` per family, and per sample name the label sets and `model` values.
#[derive(Default)]
struct Scrape {
    types: BTreeMap<String, String>,
    label_sets: BTreeMap<String, BTreeSet<BTreeSet<String>>>,
    models: BTreeSet<String>,
}

fn parse_labels(inner: &str) -> Vec<(String, String)> {
    // Label values in these tests hold no `,` or `"` (URLs, names, numbers).
    inner
        .split("\",")
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            let (k, v) = p.split_once("=\"")?;
            Some((k.to_string(), v.trim_end_matches('"').to_string()))
        })
        .collect()
}

impl Scrape {
    fn add(&mut self, text: &str) {
        for line in text.lines() {
            if let Some(t) = line.strip_prefix("# TYPE ") {
                let (name, kind) = t.split_once(' ').unwrap();
                self.types.insert(name.to_string(), kind.to_string());
                continue;
            }
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let (name, labels) = match line.split_once('{') {
                Some((n, rest)) => (n, parse_labels(rest.rsplit_once('}').unwrap().0)),
                None => (line.split_whitespace().next().unwrap(), Vec::new()),
            };
            for (k, v) in &labels {
                if k == "model" {
                    self.models.insert(v.clone());
                }
            }
            self.label_sets
                .entry(name.to_string())
                .or_default()
                .insert(labels.into_iter().map(|(k, _)| k).collect());
        }
    }

    /// Problems with `f` in this scrape (empty = served as the peer serves it).
    fn check(&self, f: &Family) -> Option<String> {
        let Some(kind) = self.types.get(&f.name) else {
            return Some(format!("{}: no samples", f.name));
        };
        if kind != &f.kind {
            return Some(format!("{}: type {kind}, the peer's is {}", f.name, f.kind));
        }
        let sample = if kind == "histogram" {
            format!("{}_count", f.name)
        } else {
            f.name.clone()
        };
        let Some(sets) = self.label_sets.get(&sample) else {
            return Some(format!("{}: no {sample} sample", f.name));
        };
        if sets.iter().all(|s| s == &f.labels) {
            None
        } else {
            Some(format!(
                "{}: labels {sets:?}, the peer's {:?}",
                f.name, f.labels
            ))
        }
    }
}

async fn post(c: &reqwest::Client, url: &str, body: serde_json::Value) -> u16 {
    let r = post_json(c, url, &body).await;
    let status = r.status().as_u16();
    let _ = r.bytes().await;
    status
}

/// `/metrics` after the three fleets' traffic, all routers started with `flavor`.
async fn scrape_after_traffic(flavor: &str) -> Scrape {
    let compat = ["--metrics-compat", flavor];
    let c = client();
    let mut scrape = Scrape::default();

    // KV fleet: a repeated prompt (cache hit and miss), streamed and chat requests.
    let pair = warm_kv_pair(&compat).await;
    let base = pair.router.url.clone();
    let ids = prompt(7, 64);
    for _ in 0..3 {
        assert_eq!(generate(&c, &base, &ids, 2).await.0, 200);
    }
    let stream =
        json!({"input_ids": ids, "stream": true, "sampling_params": {"max_new_tokens": 2}});
    assert_eq!(post(&c, &format!("{base}/generate"), stream).await, 200);
    let chat =
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1});
    assert_eq!(
        post(&c, &format!("{base}/v1/chat/completions"), chat).await,
        200
    );
    scrape.add(&get_text(&c, &format!("{base}/metrics")).await);

    // Round robin over a 503 worker and a mock: the 503 is retried on the mock.
    let stub = Stub::start(Behaviour::Status(503)).await;
    let m = fast_mock();
    // One failure opens a circuit: the 503 worker's breaker moves closed -> open (the
    // transitions counters).
    let mut args = vec!["--mode", "round-robin", "--cb-failure-threshold", "1"];
    args.extend_from_slice(&compat);
    let rr = router_with(&[&stub.url, &m.url], &args).await;
    let body = json!({"text": "hi", "sampling_params": {"max_new_tokens": 1}});
    for _ in 0..4 {
        assert_eq!(
            post(&c, &format!("{}/generate", rr.url), body.clone()).await,
            200
        );
    }
    // A body that is not JSON: the router's own 400 (a non-retryable error).
    let bad = c
        .post(format!("{}/generate", rr.url))
        .header("content-type", "application/json")
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    scrape.add(&get_text(&c, &format!("{}/metrics", rr.url)).await);

    // Two 503 workers and no retry allowed: the one attempt asks for a retry (retries
    // exhausted) and its 503 is relayed (a worker error).
    let (s1, s2) = (
        Stub::start(Behaviour::Status(503)).await,
        Stub::start(Behaviour::Status(503)).await,
    );
    args.extend_from_slice(&["--retry-max-retries", "0"]);
    let busy = router_with(&[&s1.url, &s2.url], &args).await;
    assert_eq!(post(&c, &format!("{}/generate", busy.url), body).await, 503);
    scrape.add(&get_text(&c, &format!("{}/metrics", busy.url)).await);
    scrape
}

async fn check_flavor(flavor: &str) -> Scrape {
    let scrape = scrape_after_traffic(flavor).await;
    let families = served(flavor);
    assert!(
        families.len() > 20,
        "the data file lists {flavor}'s families"
    );
    let problems: Vec<String> = families.iter().filter_map(|f| scrape.check(f)).collect();
    assert!(problems.is_empty(), "{flavor}: {problems:#?}");
    assert!(
        scrape.models.iter().all(|m| MODELS.contains(&m.as_str())),
        "model labels name the served model: {:?}",
        scrape.models
    );
    scrape
}

#[tokio::test]
async fn smg_dashboard_families_are_served() {
    let scrape = check_flavor("smg").await;
    assert!(
        scrape.models.contains("mock-model"),
        "the KV fleet's model is named: {:?}",
        scrape.models
    );
}

#[tokio::test]
async fn sgl_router_dashboard_families_are_served() {
    check_flavor("sgl-router").await;
}

#[test]
fn the_data_file_is_well_formed() {
    let mut seen = BTreeSet::new();
    for line in FAMILIES.lines().filter(|l| !l.starts_with('#')) {
        let cols: Vec<&str> = line.split('\t').collect();
        assert_eq!(cols.len(), 6, "six columns: {line}");
        assert!(["smg", "sgl-router"].contains(&cols[0]), "{line}");
        assert!(
            ["counter", "gauge", "histogram"].contains(&cols[2]),
            "{line}"
        );
        assert!(["served", "hook", "n/a"].contains(&cols[4]), "{line}");
        assert!(!cols[5].is_empty(), "a source or a reason: {line}");
        assert!(seen.insert(cols[1]), "listed once: {}", cols[1]);
    }
}
