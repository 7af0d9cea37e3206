//! Shared predictions between router replicas over a real `nats-server`: replicas A and B
//! (`--nats-url`, sharing on by default) each publish their predict-on-route bookings and
//! apply the other's, so a prompt routed by one replica is routed to the same worker by the
//! other. The routers read no ZMQ events (`--nats-url` alone, and nobody relays): the shared
//! prediction is the only thing that can tell B where A sent a prompt, and with 4 workers and
//! uniformly broken ties B would agree with A on 6 prompts by chance with probability 4^-6.
//! A and B run with `--kv-blind-threshold 0`: rendezvous placement of cold prompts would make
//! them agree without sharing anything (tests/kv/blind_replicas.rs tests that).
//! Replica C runs with `--share-predictions=false` and must apply nothing.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use support::http::{client, metric};
use support::kv::*;
use support::nats::NatsServer;
use support::wait::wait_for;

const SUBSCRIBED: &str = "kvrouter_shared_predictions_subscribed";
const BOOKS: &str = "kvrouter_shared_predictions_applied_total{kind=\"book\"}";
const IN: &str = "kvrouter_shared_predictions_messages_total{direction=\"in\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_converge_and_share_a_booking() {
    let nats = NatsServer::start().await;
    let mocks: Vec<_> = (0..4).map(|_| kv_mock(&["--speedup", "0"])).collect();
    let workers: Vec<&str> = mocks.iter().map(|m| m.url.as_str()).collect();
    let sharing = ["--nats-url", &nats.url, "--kv-blind-threshold", "0"];
    let a = kv_router(&workers, &sharing);
    let b = kv_router(&workers, &sharing);
    let off = kv_router(
        &workers,
        &["--nats-url", &nats.url, "--share-predictions=false"],
    );
    let c = client();
    for r in [&a.url, &b.url] {
        wait_for("the replica to subscribe and register the workers", || {
            let (c, r) = (c.clone(), r.clone());
            async move {
                metric(&r, SUBSCRIBED).await == 1.0
                    && debug_index(&c, &r).await["units"]
                        .as_array()
                        .is_some_and(|u| u.len() == 4)
            }
        })
        .await;
    }
    wait_units(&c, &off.url, 4).await;

    // Bookings made so far by A and B (each routed request books once).
    let mut made = [0u32; 2];
    let replicas = [&a.url, &b.url];
    for i in 0..6u32 {
        let (first, second) = ((i % 2) as usize, ((i + 1) % 2) as usize);
        let ids = prompt(1000 + i, 64);
        let (status, w_first, body) = generate(&c, replicas[first], &ids, 2).await;
        assert_eq!(status, 200, "{body}");
        made[first] += 1;
        // Everything `first` booked has reached `second` (one publisher's messages arrive in order).
        let want = f64::from(made[first]);
        wait_for("the other replica to apply the booking", || {
            let r = replicas[second].to_string();
            async move { metric(&r, BOOKS).await >= want }
        })
        .await;
        let (status, w_second, body) = generate(&c, replicas[second], &ids, 2).await;
        assert_eq!(status, 200, "{body}");
        made[second] += 1;
        assert!(w_first.is_some());
        assert_eq!(
            w_first, w_second,
            "prompt {i}: replica {second} did not follow replica {first}'s booking"
        );
    }
    // Each replica applied exactly the other's bookings: never its own, none from `off`.
    for (me, other) in [(0, 1), (1, 0)] {
        wait_for("the last bookings to arrive", || {
            let r = replicas[me].to_string();
            let want = f64::from(made[other]);
            async move { metric(&r, BOOKS).await >= want }
        })
        .await;
        assert_eq!(metric(replicas[me], BOOKS).await, f64::from(made[other]));
        assert!(metric(replicas[me], IN).await >= 1.0);
    }
    // The non-sharing replica routes with its own bookings only and publishes nothing.
    let (status, _, _) = generate(&c, &off.url, &prompt(7, 64), 2).await;
    assert_eq!(status, 200);
    assert_eq!(metric(&off.url, SUBSCRIBED).await, 0.0);
    assert_eq!(metric(&off.url, BOOKS).await, 0.0);
    for r in replicas {
        assert_eq!(metric(r, BOOKS).await, f64::from(made[0].max(made[1])));
    }
}
