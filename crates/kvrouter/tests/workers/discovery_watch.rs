//! The router's etcd watch: it survives an etcd restart (reconnects and resumes from the
//! next revision), skips keys whose value is not a worker record without crashing, leaves
//! workers added through `/workers` alone, and lists router replicas at `/routers`.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::etcd::EtcdServer;
use support::http::{get, post};
use support::procs::{fast_mock, start_router};
use support::wait::wait_for;

/// URLs the router lists in `/workers` (any state).
async fn urls(router: &str) -> Vec<String> {
    let v = support::admin::workers(router).await;
    let mut out: Vec<String> = v["workers"]
        .as_array()
        .map(|ws| {
            ws.iter()
                .filter_map(|w| w["url"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

async fn wait_urls(router: &str, want: &[&str], what: &str) {
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    let r = router.to_string();
    wait_for(what, || {
        let (r, want) = (r.clone(), want.clone());
        async move { urls(&r).await == want }
    })
    .await;
}

fn record(url: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"url": url})).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_survives_an_etcd_restart() {
    let mut etcd = EtcdServer::start().await;
    let (a, b) = (fast_mock(), fast_mock());
    let router = start_router(&["--etcd-endpoints", &etcd.endpoint]);
    etcd.put("/kvrouter/workers/a", &record(&a.url)).await;
    wait_urls(&router.url, &[&a.url], "worker a from etcd").await;

    etcd.restart().await;
    // Written right after the restart, possibly before the router's watch is back: the
    // resumed watch (from the revision after the last one applied) must replay it.
    etcd.put("/kvrouter/workers/b", &record(&b.url)).await;
    etcd.delete("/kvrouter/workers/a").await;
    wait_urls(
        &router.url,
        &[&b.url],
        "b added and a removed after the restart",
    )
    .await;

    // The router's own replica key is still (or again) there.
    let r = router.url.clone();
    wait_for("the router listed at /routers after the restart", || {
        let r = r.clone();
        async move { get(&r, "/routers").await.1["total"] == 1 }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_values_are_skipped_and_the_router_keeps_going() {
    let etcd = EtcdServer::start().await;
    let (a, b) = (fast_mock(), fast_mock());
    // A bad key present before the router starts (seen by the first full read) ...
    etcd.put("/kvrouter/workers/early-bad", b"{not json").await;
    etcd.put("/kvrouter/workers/a", &record(&a.url)).await;
    let router = start_router(&["--etcd-endpoints", &etcd.endpoint]);
    wait_urls(&router.url, &[&a.url], "worker a despite a bad key").await;
    // ... and bad values arriving through the watch.
    for bad in [
        &b"not json"[..],
        br#"{"url": 5}"#,
        br#"{"url": "ftp://h:1"}"#,
        br#"{"url": "http://u:pw@127.0.0.1:1"}"#,
        br#"{"url": "http://127.0.0.1:1", "api_key_env": "HOME"}"#,
        br#"{"url": "http://127.0.0.1:1", "api_key_env": "KVROUTER_WORKER_API_KEY_UNSET"}"#,
    ] {
        etcd.put("/kvrouter/workers/bad", bad).await;
    }
    etcd.put("/kvrouter/workers/b", &record(&b.url)).await;
    wait_urls(
        &router.url,
        &[&a.url, &b.url],
        "worker b after the bad values",
    )
    .await;
    let (status, _) = get(&router.url, "/health").await;
    assert_eq!(status, 200, "the router is alive");
    // A good value for a key that was bad so far is taken.
    etcd.delete("/kvrouter/workers/b").await;
    etcd.put("/kvrouter/workers/bad", &record(&b.url)).await;
    wait_urls(&router.url, &[&a.url, &b.url], "the fixed key").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_workers_keep_working_beside_discovery() {
    let etcd = EtcdServer::start().await;
    let (manual, found) = (fast_mock(), fast_mock());
    let router = start_router(&["--etcd-endpoints", &etcd.endpoint]);
    let (status, _) = post(&router.url, "/workers", json!({"url": manual.url})).await;
    assert_eq!(status, 202);
    etcd.put("/kvrouter/workers/found", &record(&found.url))
        .await;
    wait_urls(&router.url, &[&manual.url, &found.url], "both workers").await;
    support::admin::wait_healthy_count(&router.url, 2).await;

    // An etcd key naming the manual worker, then deleted: the manual worker stays.
    etcd.put("/kvrouter/workers/dup", &record(&manual.url))
        .await;
    etcd.delete("/kvrouter/workers/dup").await;
    etcd.delete("/kvrouter/workers/found").await;
    wait_urls(&router.url, &[&manual.url], "only the manual worker left").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(urls(&router.url).await, vec![manual.url.clone()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routers_lists_every_replica() {
    let etcd = EtcdServer::start().await;
    // A TTL far beyond the deadlines: only a revoke removes a replica key in time.
    let ttl = ["--etcd-lease-ttl-secs", "600"];
    let one = start_router(&["--etcd-endpoints", &etcd.endpoint, ttl[0], ttl[1]]);
    let mut two = start_router(&[
        "--etcd-endpoints",
        &etcd.endpoint,
        ttl[0],
        ttl[1],
        "--mode",
        "round-robin",
    ]);
    let r = one.url.clone();
    wait_for("two replicas at /routers", || {
        let r = r.clone();
        async move { get(&r, "/routers").await.1["total"] == 2 }
    })
    .await;
    let (status, v) = get(&two.url, "/routers").await;
    assert_eq!(status, 200);
    let listed = v["routers"].as_array().expect("routers");
    let me: Vec<_> = listed.iter().filter(|x| x["self"] == true).collect();
    assert_eq!(me.len(), 1, "{v}");
    assert_eq!(me[0]["url"], two.url.as_str());
    assert_eq!(me[0]["mode"], "round-robin");
    assert_eq!(me[0]["id"], v["self"]);

    // SIGTERM: the replica revokes its lease on the way out.
    let status = std::process::Command::new("kill")
        .args(["-TERM", &two.pid().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    assert!(
        two.wait_exit(Duration::from_secs(30)).is_some(),
        "router exits"
    );
    let (_, v) = get(&one.url, "/routers").await;
    assert_eq!(v["total"], 1, "the stopped replica is gone at once: {v}");

    let plain = start_router(&[]);
    let (status, _) = get(&plain.url, "/routers").await;
    assert_eq!(status, 404, "/routers needs --etcd-endpoints");
}
