//! Admin lock (issue 12, finding 7): on a non-loopback bind without an admin key the admin
//! routes answer 403 unless `--insecure-admin`; with an admin key the fan-out information
//! routes need it too; with only `--api-key` that key is the admin key (sgl-router semantics).
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use serde_json::{json, Value};
use support::admin::wait_ready;
use support::http::{client, post_json};
use support::procs::*;

/// A router bound to 0.0.0.0 (not loopback), reached through 127.0.0.1.
fn open_router(args: &[&str]) -> (Proc, String) {
    let mut all = vec!["--host", "0.0.0.0", "--port", "0"];
    all.extend_from_slice(FAST_HEALTH);
    all.extend_from_slice(args);
    let p = Proc::spawn(env!("CARGO_BIN_EXE_router"), &all);
    let url = p.url.replace("0.0.0.0", "127.0.0.1");
    (p, url)
}

/// `(status, json body)` of `method path` with an optional bearer key.
async fn call(method: &str, url: String, key: Option<&str>) -> (u16, Value) {
    let c = client();
    let mut req = match method {
        "GET" => c.get(url),
        "DELETE" => c.delete(url),
        _ => c.post(url).json(&json!({})),
    };
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

const ADMIN: &[(&str, &str)] = &[
    ("GET", "/workers"),
    ("POST", "/flush_cache"),
    ("POST", "/pause_generation"),
    ("POST", "/continue_generation"),
    ("POST", "/abort_request"),
    ("DELETE", "/workers/no-such-worker"),
    ("GET", "/refit/state"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_loopback_bind_without_admin_key_refuses_admin_routes() {
    let m = fast_mock();
    let (_r, url) = open_router(&["--worker-urls", &m.url]);
    wait_ready(&url, "router ready").await;
    for (method, path) in ADMIN {
        let (status, v) = call(method, format!("{url}{path}"), None).await;
        assert_eq!(status, 403, "{method} {path}: {v}");
        assert_eq!(v["error"]["code"], "admin_locked", "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("--admin-api-key") && msg.contains("--insecure-admin"),
            "{msg}"
        );
    }
    // The data plane and the (keyless) information routes still work.
    let resp = post_json(
        &client(),
        &format!("{url}/generate"),
        &json!({"text":"hi","sampling_params":{"max_new_tokens":1}}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    for path in ["/get_loads", "/get_server_info", "/metrics", "/health"] {
        let (status, v) = call("GET", format!("{url}{path}"), None).await;
        assert_eq!(status, 200, "{path}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_admin_opens_admin_routes() {
    let m = fast_mock();
    let (_r, url) = open_router(&["--worker-urls", &m.url, "--insecure-admin"]);
    wait_ready(&url, "router ready").await;
    let (status, v) = call("GET", format!("{url}/workers"), None).await;
    assert_eq!(status, 200, "{v}");
    let id = v["workers"][0]["id"].as_str().unwrap().to_string();
    let (status, v) = call("POST", format!("{url}/flush_cache"), None).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = call("POST", format!("{url}/pause_generation"), None).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = call("POST", format!("{url}/continue_generation"), None).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = call("DELETE", format!("{url}/workers/{id}"), None).await;
    assert_eq!(status, 202, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_key_guards_fanout_information_routes() {
    let m = fast_mock();
    let (_r, url) = open_router(&[
        "--worker-urls",
        &m.url,
        "--api-key",
        "data-key",
        "--admin-api-key",
        "admin-key",
    ]);
    wait_ready(&url, "router ready").await;
    for path in ["/get_loads", "/engine_metrics", "/get_server_info"] {
        for key in [None, Some("data-key"), Some("admin-ke"), Some("admin-key!")] {
            let (status, v) = call("GET", format!("{url}{path}"), key).await;
            assert_eq!(status, 401, "{path} with {key:?}: {v}");
        }
        let (status, v) = call("GET", format!("{url}{path}"), Some("admin-key")).await;
        assert_eq!(status, 200, "{path}: {v}");
    }
    // Probes and the Prometheus scrape stay keyless.
    for path in ["/metrics", "/health", "/readiness"] {
        let (status, v) = call("GET", format!("{url}{path}"), None).await;
        assert_eq!(status, 200, "{path}: {v}");
    }
    // The admin key opens the admin routes on a non-loopback bind (no lock).
    let (status, v) = call("POST", format!("{url}/flush_cache"), Some("admin-key")).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = call("POST", format!("{url}/flush_cache"), Some("data-key")).await;
    assert_eq!(status, 401, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_alone_is_the_admin_key() {
    let m = fast_mock();
    let (_r, url) = open_router(&["--worker-urls", &m.url, "--api-key", "k"]);
    // /readiness stays open: a probe has no key.
    wait_ready(&url, "router ready").await;
    for path in [
        "/workers",
        "/get_loads",
        "/get_server_info",
        "/engine_metrics",
    ] {
        let (status, v) = call("GET", format!("{url}{path}"), None).await;
        assert_eq!(status, 401, "{path}: {v}");
        let (status, v) = call("GET", format!("{url}{path}"), Some("k")).await;
        assert_eq!(status, 200, "{path}: {v}");
    }
    let (status, v) = call("POST", format!("{url}/flush_cache"), Some("k")).await;
    assert_eq!(status, 200, "{v}");
}
