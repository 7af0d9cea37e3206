//! Two router replicas fed by one NATS stream converge to the same KV index: router R relays
//! what it reads from the workers' ZMQ streams (`--publish-events`); replicas A and B read only
//! NATS (`--nats-url`). Real `nats-server` and `sglang-mock` processes on loopback.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use std::time::Duration;

use support::http::client;
use support::kv::*;
use support::wait::Deadline;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_fed_by_one_nats_stream_converge() {
    let nats = support::nats::NatsServer::start().await;
    let w1 = kv_mock(&["--speedup", "0"]);
    let w2 = kv_mock(&["--speedup", "0"]);
    let workers = [w1.url.as_str(), w2.url.as_str()];
    let relay = kv_router(&workers, &["--nats-url", &nats.url, "--publish-events"]);
    let a = kv_router(&workers, &["--nats-url", &nats.url]);
    let b = kv_router(&workers, &["--nats-url", &nats.url]);
    let c = client();
    wait_sources(&c, &relay.url, 2).await;
    // Replicas read no ZMQ; wait until both list the two workers (registered).
    for r in [&a.url, &b.url] {
        wait_index(&c, r, "workers registered", |v| {
            v["units"].as_array().is_some_and(|u| u.len() == 2) && v["zmq_sources"] == 0
        })
        .await;
    }
    // Traffic through the relay router (and straight to the workers).
    warm_all(&c, &relay.url, &workers).await;
    for i in 0..12u32 {
        let (status, _, body) = generate(&c, &relay.url, &prompt(i, 40 + 4 * i as usize), 3).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, _, _) = generate(&c, &w2.url, &prompt(99, 64), 3).await;
    assert_eq!(status, 200);
    // All three indexes agree (polled with a deadline: events are asynchronous).
    let deadline = Deadline::after(Duration::from_secs(30));
    let last = loop {
        let r = debug_index(&c, &relay.url).await;
        let (va, vb) = (debug_index(&c, &a.url).await, debug_index(&c, &b.url).await);
        if r["resident_blocks"].as_u64().unwrap_or(0) > 50
            && va["digest"] == r["digest"]
            && vb["digest"] == r["digest"]
        {
            break r;
        }
        deadline.check(&format!("replicas to converge: relay {r} a {va} b {vb}"));
        tokio::time::sleep(Duration::from_millis(25)).await;
    };

    let va = debug_index(&c, &a.url).await;
    let vb = debug_index(&c, &b.url).await;
    assert_eq!(va["units"], vb["units"]);
    assert_eq!(va["resident_blocks"], last["resident_blocks"]);
}
