//! etcd discovery, done-when test of issue 13: a worker registered through etcd (by the
//! `router register` sidecar) gets traffic and disappears from the router when its lease
//! ends; plus the lease-expiry-to-removal measurement (ignored: run it by hand, see
//! docs/discovery.md).

use crate::support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::etcd::{EtcdServer, Sidecar};
use support::http::{client, generate};
use support::procs::{fast_mock, start_router};
use support::wait::wait_for;

/// URLs of the routable workers the router lists.
async fn routable_urls(router: &str) -> Vec<String> {
    let v = support::admin::workers(router).await;
    v["workers"]
        .as_array()
        .map(|ws| {
            ws.iter()
                .filter(|w| w["routable"] == true)
                .filter_map(|w| w["url"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_registered_through_etcd_gets_traffic_and_disappears_when_its_lease_ends() {
    let etcd = EtcdServer::start().await;
    let mock = fast_mock();
    let router = start_router(&["--etcd-endpoints", &etcd.endpoint]);
    assert!(routable_urls(&router.url).await.is_empty());

    let mut sidecar = Sidecar::start(&[
        "--worker-url",
        &mock.url,
        "--etcd-endpoints",
        &etcd.endpoint,
        "--etcd-lease-ttl-secs",
        "2",
    ]);
    let record: serde_json::Value =
        serde_json::from_slice(&etcd.get(&sidecar.key).await.expect("worker key written"))
            .expect("record is JSON");
    assert_eq!(record["url"], mock.url.as_str());
    assert!(
        record["model"].is_string(),
        "model read from the worker: {record}"
    );
    assert_eq!(record["dp_size"], 1);

    let r = router.url.clone();
    let m = mock.url.clone();
    wait_for("the etcd-registered worker to be routable", || {
        let (r, m) = (r.clone(), m.clone());
        async move { routable_urls(&r).await == vec![m] }
    })
    .await;
    let c = client();
    let body = json!({"text": "hello etcd", "sampling_params": {"max_new_tokens": 2}});
    let (status, worker, _) = generate(&c, &router.url, &body).await;
    assert_eq!(status, 200);
    assert!(worker.is_some(), "the response names the serving worker");

    // The sidecar dies without deregistering: only the lease expiry can remove the worker.
    sidecar.kill();
    wait_for(
        "the worker to leave routing after its lease expired",
        || {
            let r = r.clone();
            async move { routable_urls(&r).await.is_empty() }
        },
    )
    .await;
    assert!(etcd.get(&sidecar.key).await.is_none(), "key expired");
    let (status, _, _) = generate(&c, &router.url, &body).await;
    assert_eq!(status, 503, "no worker left");
}

/// Lease expiry -> removal from routing, 10 rounds (prints min / median / max). Run:
/// `cargo test -p kvrouter --features etcd --test workers discovery_lease -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; prints numbers (docs/discovery.md)"]
async fn measure_lease_expiry_to_removal() {
    const TTL: i64 = 2;
    const ROUNDS: usize = 10;
    let etcd = EtcdServer::start().await;
    let mock = fast_mock();
    let router = start_router(&["--etcd-endpoints", &etcd.endpoint]);
    let mut c = etcd.client().await;
    let value = serde_json::to_vec(&json!({"url": mock.url})).expect("json");
    let mut after_ttl_ms = Vec::new();
    for round in 0..ROUNDS {
        let lease = c.lease_grant(TTL, None).await.expect("grant").id();
        let granted = Instant::now();
        let key = format!("/kvrouter/workers/measure-{round}");
        let options = etcd_client::PutOptions::new().with_lease(lease);
        c.put(key, value.clone(), Some(options)).await.expect("put");
        let r = router.url.clone();
        wait_for("worker routable", || {
            let r = r.clone();
            async move { routable_urls(&r).await.len() == 1 }
        })
        .await;
        // No keep-alive: the lease expires TTL after the grant.
        while !routable_urls(&router.url).await.is_empty() {
            assert!(granted.elapsed() < Duration::from_secs(30), "never removed");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let ms = granted.elapsed().as_secs_f64() * 1000.0 - (TTL as f64) * 1000.0;
        after_ttl_ms.push(ms);
        let r = router.url.clone();
        wait_for("worker gone from /workers", || {
            let r = r.clone();
            async move {
                support::admin::workers(&r).await["workers"]
                    .as_array()
                    .is_some_and(|a| a.is_empty())
            }
        })
        .await;
    }
    after_ttl_ms.sort_by(f64::total_cmp);
    println!(
        "lease expiry -> removal from routing, ms after the {TTL} s TTL ({ROUNDS} rounds): \
         min {:.0} median {:.0} max {:.0}",
        after_ttl_ms[0],
        after_ttl_ms[ROUNDS / 2],
        after_ttl_ms[ROUNDS - 1]
    );
}
