//! A worker whose KV event stream claims far more blocks than its advertised capacity
//! (`max_total_num_tokens`) cannot grow the router's index without bound: the rank is cleared,
//! marked recovering and counted (`kvrouter_kv_index_cap_exceeded_total{worker}`), and later
//! events apply again within the cap (issue 12, finding 6).
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion
#![allow(clippy::disallowed_methods)] // fixtures spawn their own tasks; `Tasks` is the router's

use crate::support;

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use support::fake_publisher::FakePublisher;
use support::kv::{blocks_of, debug_index, kv_router, wait_index, PAGE};
use support::loadgen::metric_sum;
use support::sglang_wire::{batch, stored};
use support::wait::Deadline;

/// Advertised capacity: 64 tokens = 16 pages of 4, so the cap is 16 + 1 + 64 = 81 entries.
const CAPACITY_TOKENS: u64 = 64;
const CAP: u64 = 81;

/// An in-process SGLang stand-in whose server info advertises a small KV capacity and a
/// ZMQ event publisher on `events_port` (the fake publisher, bound on loopback).
async fn small_worker(events_port: u16) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let info = json!({
        "page_size": PAGE,
        "dp_size": 1,
        "served_model_name": "capped",
        "max_total_num_tokens": CAPACITY_TOKENS,
        "kv_events_config": json!({"publisher": "zmq", "endpoint": format!("tcp://*:{events_port}")}).to_string(),
    });
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let info = info.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let body = match req.uri().path() {
                        "/server_info" | "/get_server_info" => info.clone(),
                        "/model_info" | "/get_model_info" => {
                            json!({"model_path": "capped", "weight_version": "default"})
                        }
                        _ => json!({}),
                    };
                    async move {
                        Ok::<_, Infallible>(
                            Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from(body.to_string())))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (url, task)
}

/// `count` one-page stores with distinct content, starting at `first`.
fn stores(first: u32, count: u32) -> Vec<u8> {
    batch(
        (first..first + count)
            .map(|i| stored(i64::from(i) + 1, &[i, i + 1, i + 2, i + 3]))
            .collect(),
    )
}

async fn cap_exceeded(c: &reqwest::Client, router: &str, worker: &str) -> u64 {
    let page = support::http::get_text(c, &format!("{router}/metrics")).await;
    let name = format!("kvrouter_kv_index_cap_exceeded_total{{worker=\"{worker}\"}}");
    metric_sum(&page, &name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_storing_past_its_capacity_stays_bounded_in_the_index() {
    let mut publisher = FakePublisher::bind("").await;
    let port: u16 = publisher
        .endpoint
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let (worker, _server) = small_worker(port).await;
    let router = kv_router(&[worker.as_str()], &[]);
    let c = support::http::client();

    // Slow joiner: re-send batch 0 (one block) until the router's index shows it.
    let first = stores(0, 1);
    publisher.lose(0, first.clone());
    let deadline = Deadline::after(Duration::from_secs(30));
    loop {
        publisher.republish(0, first.clone()).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        if blocks_of(&debug_index(&c, &router.url).await, &worker) == 1 {
            break;
        }
        deadline.check("the router to apply batch 0 of the capped worker");
    }
    assert_eq!(cap_exceeded(&c, &router.url, &worker).await, 0);

    // 1,000 more blocks from a worker that can hold 16 pages. Each time the rank reaches
    // 82 entries it is cleared and counted: 1,001 = 12 x 82 + 17. The rank keeps applying
    // events (recovering: it holds only blocks stored since the last clear): 17 + 10.
    publisher.publish(1, stores(1, 1_000)).await;
    publisher.publish(2, stores(5_000, 10)).await;
    let view: Value = wait_index(&c, &router.url, "the capped worker's stores", |v| {
        blocks_of(v, &worker) == 27
    })
    .await;
    assert!(blocks_of(&view, &worker) <= CAP, "{view}");
    assert_eq!(cap_exceeded(&c, &router.url, &worker).await, 12);
}
