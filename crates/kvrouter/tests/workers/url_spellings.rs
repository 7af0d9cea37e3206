//! Issue 25 findings 4 and 6 against a real `router` (and `sglang-mock`): IPv6 spellings of the
//! metadata address (IPv4-mapped, IPv4-compatible, NAT64) and IPv4 spellings in hex, octal
//! or one number are refused at once by the admin API and at startup, as `169.254.169.254`
//! is; more spellings of one worker (`[::ffff:127.0.0.1]`, `localhost.`, `0.0.0.0`) register
//! once. Before the fix the IPv6 spellings were accepted, probed and registered, and the
//! spellings of one worker registered once each.
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

use crate::support;

use serde_json::json;
use std::process::{Command, Stdio};

const METADATA_SPELLINGS: &[&str] = &[
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:a9fe:a9fe]:80",
    "http://[::169.254.169.254]",
    "http://[64:ff9b::169.254.169.254]",
    "http://[64:ff9b::a9fe:a9fe]:8080",
    "http://[64:ff9b:1:a9fe:a9:fe00::]",
    "http://0xa9fea9fe/",
    "http://0251.0376.0251.0376",
    "http://2852039166",
];

#[tokio::test]
async fn every_spelling_of_the_metadata_address_is_refused() {
    let r = support::procs::start_router(&[]);
    for url in METADATA_SPELLINGS {
        for path in ["/workers", "/add_worker"] {
            let (status, v) = support::http::post(&r.url, path, json!({ "url": url })).await;
            assert!((400..500).contains(&status), "{url} {path}: {status} {v}");
            assert!(v.to_string().contains("link-local"), "{url} {path}: {v}");
        }
    }
    let workers = support::admin::workers(&r.url).await;
    assert_eq!(
        workers["workers"].as_array().map(Vec::len),
        Some(0),
        "{workers}"
    );
    // At startup too.
    for url in [
        "http://[::ffff:169.254.169.254]:80",
        "http://[64:ff9b::a9fe:a9fe]",
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_router"))
            .args(["--port", "0", "--worker-urls", url])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "router started with {url}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("link-local"), "{url}: {stderr}");
    }
}

#[tokio::test]
async fn more_spellings_of_one_worker_register_once() {
    let mock = support::procs::fast_mock();
    let port: u16 = mock.url.rsplit(':').next().unwrap().parse().unwrap();
    let r = support::procs::router_with(&[&mock.url], &[]).await;
    for spelling in [
        format!("http://[::ffff:127.0.0.1]:{port}"),
        format!("http://localhost.:{port}/"),
        format!("http://0.0.0.0:{port}"),
        format!("http://0x7f000001:{port}"),
    ] {
        let (status, v) = support::http::post(&r.url, "/workers", json!({ "url": spelling })).await;
        assert!(status < 300, "{spelling}: {status} {v}");
        assert_eq!(v["url"], mock.url.as_str(), "{spelling}: {v}");
        // The registry answers a duplicate at once, without a new registration job.
        assert_eq!(v["message"], "Worker already registered", "{spelling}: {v}");
    }
    let workers = support::admin::workers(&r.url).await;
    let list = workers["workers"].as_array().unwrap();
    assert_eq!(list.len(), 1, "one worker, not one per spelling: {workers}");
}
