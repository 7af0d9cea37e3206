//! Worker credentials on every call the router makes to a worker: a fleet of `sglang-mock`s
//! started with `--api-key` (they answer 401 without `Authorization: Bearer <key>`) serves
//! traffic, `/get_loads`, `/engine_metrics`, a full refit (pause, flush, weight-update group,
//! update, version, continue) and an abort-all through the router, and the key never appears
//! in the router's log (debug level) or in an answer to the client. A worker probed without
//! its key stays pending with one warning until the key is given.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use reqwest::Client;
use serde_json::{json, Value};
use support::captured::Captured;
use support::http::client;
use support::procs::{mock, Proc};
use support::wait::wait_for;

const WORKER_KEY: &str = "worker-key-5e1f0c";
const ROUTER_KEY: &str = "router-key-9a7b2d";

const FAST: &[&str] = &[
    "--mode",
    "round-robin",
    "--health-check-interval-secs",
    "0.2",
    "--health-failure-threshold",
    "1",
    "--health-success-threshold",
    "1",
];

async fn call(
    c: &Client,
    key: Option<&str>,
    method: &str,
    url: &str,
    body: Value,
) -> (u16, String) {
    let mut req = match method {
        "GET" => c.get(url),
        "DELETE" => c.delete(url),
        _ => c.post(url).json(&body),
    };
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let r = req
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn wait_healthy(c: &Client, key: Option<&str>, router: &str, n: usize) {
    wait_for(&format!("{n} healthy workers"), || async move {
        let (_, text) = call(c, key, "GET", &format!("{router}/workers"), Value::Null).await;
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        v["workers"]
            .as_array()
            .is_some_and(|ws| ws.iter().filter(|w| w["is_healthy"] == true).count() == n)
    })
    .await;
}

/// Everything the router calls on its workers, through the router, each answered 200.
async fn drive_fleet(c: &Client, key: Option<&str>, router: &str, workers: &[&str]) -> Vec<String> {
    let mut answers = Vec::new();
    let mut ok = |what: &str, (status, text): (u16, String)| {
        assert_eq!(status, 200, "{what}: {text}");
        answers.push(text);
    };
    let gen =
        json!({"input_ids": [1, 2, 3, 4, 5, 6, 7, 8], "sampling_params": {"max_new_tokens": 2}});
    for _ in 0..4 {
        ok(
            "generate",
            call(c, key, "POST", &format!("{router}/generate"), gen.clone()).await,
        );
    }
    let stream = json!({"text": "hi", "stream": true, "sampling_params": {"max_new_tokens": 2}});
    ok(
        "stream",
        call(c, key, "POST", &format!("{router}/generate"), stream).await,
    );

    let (s, loads) = call(c, key, "GET", &format!("{router}/get_loads"), Value::Null).await;
    let v: Value = serde_json::from_str(&loads).unwrap();
    assert_eq!(
        (s, v["successful"].as_u64()),
        (200, Some(2)),
        "get_loads: {loads}"
    );
    let (s, metrics) = call(
        c,
        key,
        "GET",
        &format!("{router}/engine_metrics"),
        Value::Null,
    )
    .await;
    assert_eq!(s, 200);
    for w in workers {
        assert!(
            metrics.contains(&format!("worker_addr=\"{w}\"")),
            "{w} in {metrics}"
        );
    }
    ok(
        "model_info",
        call(
            c,
            key,
            "GET",
            &format!("{router}/get_model_info"),
            Value::Null,
        )
        .await,
    );

    let steps: [(&str, Value); 6] = [
        ("/pause_generation", json!({"mode": "abort"})),
        ("/flush_cache", json!({})),
        (
            "/init_weights_update_group",
            json!({"master_address": "127.0.0.1", "master_port": 29500, "rank_offset": 1,
                   "world_size": 3, "group_name": "g", "backend": "nccl"}),
        ),
        (
            "/update_weights_from_distributed",
            json!({"names": ["w"], "dtypes": ["bfloat16"], "shapes": [[4, 4]],
                   "group_name": "g", "flush_cache": true, "weight_version": "v2"}),
        ),
        ("/update_weight_version", json!({"new_version": "v2"})),
        ("/continue_generation", json!({})),
    ];
    for (path, body) in steps {
        ok(
            path,
            call(c, key, "POST", &format!("{router}{path}"), body).await,
        );
    }
    let (s, state) = call(c, key, "GET", &format!("{router}/refit/state"), Value::Null).await;
    let v: Value = serde_json::from_str(&state).unwrap();
    assert_eq!(
        (
            s,
            v["versions_agree"].as_bool(),
            v["weight_version"].as_str()
        ),
        (200, Some(true), Some("v2")),
        "{state}"
    );
    ok(
        "abort_all",
        call(
            c,
            key,
            "POST",
            &format!("{router}/abort_request"),
            json!({"abort_all": true}),
        )
        .await,
    );
    ok(
        "generate after the refit",
        call(c, key, "POST", &format!("{router}/generate"), gen).await,
    );
    answers
}

fn assert_never_shown(secret: &str, log: &[String], answers: &[String]) {
    assert!(
        !log.iter().any(|l| l.contains(secret)),
        "the key is in the router's log"
    );
    assert!(
        !answers.iter().any(|a| a.contains(secret)),
        "the key is in an answer"
    );
}

/// A mock (`--speedup 0`, weight version `v1`) that wants `key` on every call.
fn keyed_mock(key: &str) -> Proc {
    mock(&["--speedup", "0", "--api-key", key, "--weight-version", "v1"])
}

/// Workers registered with `POST /workers {"url", "api_key"}`; the router itself has no key,
/// so no client `Authorization` exists to pass through: every call carries the worker's key.
#[tokio::test]
async fn per_worker_keys_reach_every_call() {
    let a = keyed_mock(WORKER_KEY);
    let b = keyed_mock(WORKER_KEY);
    let c = client();
    let (s, _) = call(&c, None, "GET", &format!("{}/health", a.url), Value::Null).await;
    assert_eq!(s, 401, "the mock refuses calls without its key");

    let mut args = FAST.to_vec();
    args.extend(["--log-level", "debug"]);
    let mut r = Captured::start(&args);
    let router = r.url.clone();
    for w in [&a.url, &b.url] {
        let (s, text) = call(
            &c,
            None,
            "POST",
            &format!("{router}/workers"),
            json!({"url": w, "api_key": WORKER_KEY}),
        )
        .await;
        assert_eq!(s, 202, "{text}");
    }
    wait_healthy(&c, None, &router, 2).await;
    let answers = drive_fleet(&c, None, &router, &[&a.url, &b.url]).await;
    let (_, workers) = call(&c, None, "GET", &format!("{router}/workers"), Value::Null).await;
    let log = r.stderr_until("abort").to_vec();
    assert!(
        log.iter().any(|l| l.contains("DEBUG")),
        "debug logging is on"
    );
    assert_never_shown(WORKER_KEY, &log, &[answers, vec![workers]].concat());
}

/// sgl-router's `--api-key` is also the default worker key: workers from `--worker-urls`
/// behind the same key, clients calling the router with it.
#[tokio::test]
async fn router_key_is_the_default_worker_key() {
    let a = keyed_mock(ROUTER_KEY);
    let b = keyed_mock(ROUTER_KEY);
    let c = client();
    let urls = format!("{},{}", a.url, b.url);
    let mut args = FAST.to_vec();
    args.extend(["--api-key", ROUTER_KEY, "--worker-urls", &urls]);
    let mut r = Captured::start(&args);
    let router = r.url.clone();
    wait_healthy(&c, Some(ROUTER_KEY), &router, 2).await;
    let answers = drive_fleet(&c, Some(ROUTER_KEY), &router, &[&a.url, &b.url]).await;
    let log = r.stderr_until("router started").to_vec();
    assert_never_shown(ROUTER_KEY, &log, &answers);
}

/// A worker that wants a key the router does not have: the probe's 401 is retried (not
/// failed at once), with one warning saying so and how to give the key; the registration
/// stays pending until the key is given (here: the pending one removed, re-added with it).
#[tokio::test]
async fn a_probe_refused_for_want_of_a_key_is_retried_with_a_warning() {
    let a = mock(&["--speedup", "0", "--api-key", WORKER_KEY]);
    let c = client();
    let mut r = Captured::start(FAST);
    let router = r.url.clone();
    let (s, text) = call(
        &c,
        None,
        "POST",
        &format!("{router}/workers"),
        json!({ "url": a.url }),
    )
    .await;
    assert_eq!(s, 202, "{text}");
    let wanted = "worker wants an API key";
    let log = r.stderr_until(wanted).to_vec();
    let line = log
        .iter()
        .find(|l| l.contains(wanted))
        .expect("the warning names the problem");
    assert!(
        line.contains(&a.url) && line.contains("no key was sent"),
        "{line}"
    );
    assert_eq!(
        log.iter().filter(|l| l.contains(wanted)).count(),
        1,
        "one warning"
    );
    let hostport = a.url.trim_start_matches("http://");
    let (_, job) = call(
        &c,
        None,
        "GET",
        &format!("{router}/workers/{hostport}"),
        Value::Null,
    )
    .await;
    let job: Value = serde_json::from_str(&job).unwrap();
    assert_eq!(job["job_status"]["status"], "pending", "{job}");
    let (s, text) = call(
        &c,
        None,
        "DELETE",
        &format!("{router}/workers/{hostport}"),
        Value::Null,
    )
    .await;
    assert_eq!(s, 202, "{text}");
    let (s, text) = call(
        &c,
        None,
        "POST",
        &format!("{router}/workers"),
        json!({"url": a.url, "api_key": WORKER_KEY}),
    )
    .await;
    assert_eq!(s, 202, "{text}");
    wait_healthy(&c, None, &router, 1).await;
}
