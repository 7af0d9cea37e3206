//! SGLang 0.5.23's load publisher (sglang-0.5.23.md M5, "Load publisher"): two fake workers,
//! one of them busy with traffic from outside the router, which only its `LoadStat` reports
//! (advertised in the `kv_events` block as `load_endpoint_port_base` + `load_topic`) reveal.
//! With the feed the router sends every new request to the idle worker; without it (the same
//! fleet, load publisher not advertised) the router cannot tell them apart and splits them.
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion
#![allow(clippy::disallowed_methods)] // fixtures spawn their own tasks; `Tasks` is the router's

use crate::support;

use std::time::Duration;

use rmpv::Value as Mp;
use serde_json::{json, Value};
use support::fake_publisher::FakePublisher;
use support::fake_worker::{port_of, server_info_0_5_23, FakeWorker};
use support::wait::Deadline;

const REQUESTS: u32 = 20;

/// `["LoadStat", running, waiting, tokens, capacity, dp_rank, waiting_uncached, total_tokens,
/// max_running, prefill_uncached, prefill_busy_us]` (`load_publisher.py` `LoadStat`).
fn load_stat(running: u64, waiting: u64, tokens: u64) -> Vec<u8> {
    let fields = [running, waiting, tokens, 65536, 0, 0, tokens, 256, 0, 0];
    let mut items = vec![Mp::from("LoadStat")];
    items.extend(fields.iter().map(|v| Mp::from(*v)));
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &Mp::Array(items)).unwrap();
    out
}

/// A `kv_events` block on `kv_port`, with the load range at `load_port` when given.
fn block(kv_port: u16, load_port: Option<u16>) -> Value {
    let mut b = json!({"publisher": "zmq", "endpoint_host": "0.0.0.0", "endpoint_port_base": kv_port,
        "topic": "", "block_size": 16, "dp_size": 1});
    if let Some(p) = load_port {
        b["load_endpoint_port_base"] = json!(p);
        b["load_topic"] = json!("load");
    }
    b
}

fn config(kv_port: u16) -> String {
    format!(
        "{{\"publisher\": \"zmq\", \"endpoint\": \"tcp://0.0.0.0:{kv_port}\", \"topic\": \"\"}}"
    )
}

/// Runs the fleet; returns the requests the busy and the idle worker received.
async fn split(with_feed: bool) -> (u64, u64) {
    let kv_busy = FakePublisher::bind("").await;
    let kv_idle = FakePublisher::bind("").await;
    let load = FakePublisher::bind("load").await;
    let (pb, pi) = (port_of(&kv_busy.endpoint), port_of(&kv_idle.endpoint));
    let load_port = with_feed.then(|| port_of(&load.endpoint));
    let busy = FakeWorker::start(server_info_0_5_23(&config(pb), block(pb, load_port), 0)).await;
    let idle = FakeWorker::start(server_info_0_5_23(&config(pi), block(pi, None), 0)).await;
    let urls = format!("{},{}", busy.url, idle.url);
    let router = support::router(&["--mode", "kv", "--page-size", "16", "--worker-urls", &urls]);
    support::admin::wait_healthy_count(&router.url, 2).await;
    let c = support::http::client();

    // The busy worker's scheduler: 64 running, 32 waiting, re-sent at SGLang's idle cadence
    // shortened (a report is fresh for 3 s; the heartbeat is 1 s).
    let feed = tokio::spawn(async move {
        let mut load = load;
        for seq in 0u64.. {
            load.republish(seq, load_stat(64, 32, 40_000)).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    if with_feed {
        let want = format!(
            "kvrouter_engine_load_waiting{{rank=\"0\",worker=\"{}\"}} 32",
            busy.url
        );
        let deadline = Deadline::after(Duration::from_secs(30));
        loop {
            let text = support::http::get_text(&c, &format!("{}/metrics", router.url)).await;
            if text.contains(&want) {
                break;
            }
            deadline.check(&format!("the router to report {want}"));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for i in 0..REQUESTS {
        let ids: Vec<u32> = (0..32).map(|t| 1000 * (i + 1) + t).collect();
        let (status, _, body) = support::kv::generate(&c, &router.url, &ids, 1).await;
        assert_eq!(status, 200, "{body}");
    }
    feed.abort();
    let _ = feed.await;
    let counts = (busy.hits("/generate"), idle.hits("/generate"));
    drop(router);
    for p in [kv_busy, kv_idle] {
        p.shut_down().await;
    }
    counts
}

#[tokio::test]
async fn load_the_router_did_not_route_steers_new_requests_away() {
    let (busy, idle) = split(true).await;
    eprintln!("with the load feed: busy {busy}, idle {idle} of {REQUESTS}");
    assert_eq!((busy, idle), (0, u64::from(REQUESTS)));
}

/// The control: without the feed the two workers look alike and ties split at random
/// (all 20 on one side has probability 2^-19).
#[tokio::test]
async fn without_the_load_feed_the_busy_worker_gets_requests() {
    let (busy, idle) = split(false).await;
    eprintln!("without the load feed: busy {busy}, idle {idle} of {REQUESTS}");
    assert!(busy > 0, "busy {busy}, idle {idle}");
    assert_eq!(busy + idle, u64::from(REQUESTS));
}

/// `GET /get_loads` over a 0.5.23 worker (only `/v1/loads`, `/get_load` 404) and an older one
/// (only `/get_load`): both answer; the older one is asked `/v1/loads` once, then remembered.
/// Before the fix the 0.5.23 worker counted as failed (`load` -1).
#[tokio::test]
async fn get_loads_reads_v1_loads_and_falls_back_to_get_load() {
    let new = FakeWorker::start(server_info_0_5_23("", Value::Null, 0)).await;
    new.set_v1_loads(Some(
        json!({"timestamp": "2026-12-01T10:00:00+00:00", "version": "0.5.23",
        "loads": [{"dp_rank": 0, "num_running_reqs": 2, "num_waiting_reqs": 1,
            "num_used_tokens": 336, "num_total_tokens": 352}]}),
    ));
    let old = FakeWorker::start(server_info_0_5_23("", Value::Null, 0)).await;
    old.state.lock().get_load = Some(json!({"load": 5}));
    let urls = format!("{},{}", new.url, old.url);
    let router = support::router(&["--worker-urls", &urls]);
    support::admin::wait_healthy_count(&router.url, 2).await;
    let c = support::http::client();
    for round in 0..2 {
        let v: Value = support::http::get_json(&c, &format!("{}/get_loads", router.url)).await;
        assert_eq!(
            (v["successful"].as_u64(), v["failed"].as_u64()),
            (Some(2), Some(0)),
            "round {round}: {v}"
        );
        let load_of = |url: &str| {
            v["loads"]
                .as_array()
                .unwrap()
                .iter()
                .find(|l| l["worker"] == url)
                .map(|l| l["load"].clone())
        };
        assert_eq!(load_of(&new.url), Some(json!(336)), "{v}");
        assert_eq!(load_of(&old.url), Some(json!(5)), "{v}");
    }
    assert_eq!(
        (old.hits("/v1/loads"), old.hits("/get_load")),
        (1, 2),
        "route remembered"
    );
    assert_eq!((new.hits("/v1/loads"), new.hits("/get_load")), (2, 0));
}
