//! Worker URL safety (issue 12, findings 4 and 9) against real `sglang-mock` and `router`
//! processes: credentials in a worker URL never show in `/metrics`, `/get_server_info`,
//! `/workers` or the `x-kvrouter-worker` header; spellings of one worker register once;
//! link-local addresses are refused at once (admin API) or at startup (`--worker-urls`).
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion
#![allow(clippy::disallowed_methods)] // fixtures spawn their own tasks; `Tasks` is the router's

use crate::support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use support::http::port_of;

#[tokio::test]
async fn credentials_never_leak() {
    let mock = support::procs::fast_mock();
    let port = port_of(&mock.url);
    let with_creds = format!("http://user:secretpw@127.0.0.1:{port}");
    let r = support::procs::router_with(&[&with_creds], &[]).await;
    let c = support::http::client();

    let metrics = support::http::get_text(&c, &format!("{}/metrics", r.url)).await;
    assert!(metrics.contains(&mock.url), "metrics name the worker");
    assert!(!metrics.contains("secretpw"), "password in /metrics");

    let info = support::http::get_text(&c, &format!("{}/get_server_info", r.url)).await;
    assert!(!info.contains("secretpw"), "password in /get_server_info");

    let workers = support::admin::workers(&r.url).await;
    assert_eq!(workers["workers"][0]["url"], mock.url.as_str());
    assert!(
        !workers.to_string().contains("secretpw"),
        "password in /workers"
    );

    let body = json!({"text": "hello", "sampling_params": {"max_new_tokens": 2}});
    let (status, worker, _) = support::http::generate(&c, &r.url, &body).await;
    assert_eq!(status, 200);
    assert_eq!(worker.as_deref(), Some(mock.url.as_str()));
}

#[tokio::test]
async fn spellings_of_one_worker_register_once() {
    let mock = support::procs::fast_mock();
    let port = port_of(&mock.url);
    let r = support::procs::router_with(&[&mock.url], &[]).await;
    for spelling in [
        format!("http://localhost:{port}/"),
        format!("http://user:secretpw@127.0.0.1:{port}"),
        format!("http://LOCALHOST:{port}"),
    ] {
        let (status, v) = support::http::post(&r.url, "/workers", json!({"url": spelling})).await;
        assert!(status < 300, "{spelling}: {status} {v}");
        assert!(!v.to_string().contains("secretpw"), "{v}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let workers = support::admin::workers(&r.url).await;
    let list = workers["workers"].as_array().unwrap();
    assert_eq!(list.len(), 1, "one worker, not one per spelling: {workers}");
    assert_eq!(list[0]["url"], mock.url.as_str());
}

#[tokio::test]
async fn link_local_workers_are_refused_at_once() {
    let r = support::procs::start_router(&[]);
    for path in ["/workers", "/add_worker"] {
        let started = Instant::now();
        let (status, v) =
            support::http::post(&r.url, path, json!({"url": "http://169.254.169.254/"})).await;
        assert!((400..500).contains(&status), "{path}: {status} {v}");
        assert!(v.to_string().contains("link-local"), "{path}: {v}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{path}: not at once"
        );
    }
    let workers = support::admin::workers(&r.url).await;
    assert_eq!(workers["workers"].as_array().map(Vec::len), Some(0));

    // With an allow-list, a literal outside it is refused too.
    let r = support::procs::start_router(&["--worker-allow-cidr", "10.0.0.0/8"]);
    let (status, v) =
        support::http::post(&r.url, "/workers", json!({"url": "http://127.0.0.1:1"})).await;
    assert!((400..500).contains(&status), "{status} {v}");
    assert!(v.to_string().contains("--worker-allow-cidr"), "{v}");

    // At startup, `--worker-urls` naming a link-local address is a configuration error.
    let out = Command::new(env!("CARGO_BIN_EXE_router"))
        .args(["--port", "0", "--worker-urls", "http://169.254.169.254:80"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "router started with a link-local worker"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("link-local"), "{stderr}");
}

#[tokio::test]
async fn credentials_are_sent_as_basic_auth_to_the_worker() {
    use tokio::io::AsyncReadExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // Records the head of the first request (the registration probe's `/health`).
    let seen = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&got).to_ascii_lowercase()
    });
    let reg = kvrouter::workers::Registry::new(
        kvrouter::workers::RegistryConfig {
            probe_timeout: Duration::from_secs(1),
            startup_timeout: Duration::from_secs(1),
            ..kvrouter::workers::RegistryConfig::default()
        },
        &kvrouter::tasks::Tasks::new(),
    );
    let url = format!("http://user:secretpw@localhost:{port}");
    let err = reg
        .add_worker(&url, kvrouter::workers::WorkerSpec::default())
        .await
        .expect_err("the fake worker never answers");
    assert!(!err.to_string().contains("secretpw"), "{err}");
    let head = seen.await.unwrap();
    // base64("user:secretpw"), lowercased like the rest of the head.
    assert!(
        head.contains("authorization: basic dxnlcjpzzwnyzxrwdw=="),
        "{head}"
    );
    assert!(!head.contains("secretpw"), "{head}");
}
