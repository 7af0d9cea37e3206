//! ZMQ ingestion against real `sglang-mock` processes: joining mid-stream replays
//! the history from the mock's replay endpoint, live stores follow, and a mock
//! restart on the same ports clears the rank and restarts the cursor.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use std::time::Duration;

use kvrouter::events::metrics::metrics;
use kvrouter::events::{rank_endpoint, Record, RecordingSink, ZmqSource, ZmqSourceConfig};
use kvrouter::workers::WorkerId;
use kvrouter_index::KvEvent;
use serde_json::json;
use support::http::{client, post};
use support::wait::Deadline;
use support::zmq::kv_config;

const PAGE: u32 = 4;
const WAIT: Duration = Duration::from_secs(20);
const WORKER: WorkerId = WorkerId(5);

fn start_mock(endpoint: &str, replay: &str) -> support::Proc {
    let config =
        json!({"publisher": "zmq", "endpoint": endpoint, "replay_endpoint": replay, "topic": "kv"})
            .to_string();
    support::mock(&[
        "--page-size",
        "4",
        "--speedup",
        "0",
        "--kv-events-config",
        &config,
    ])
}

/// (endpoint, replay endpoint) as the mock reports them in `/server_info`.
async fn kv_endpoints(url: &str) -> (String, String) {
    let config = kv_config(url).await;
    let endpoint = config["endpoint"].as_str().expect("endpoint");
    let replay = config["replay_endpoint"].as_str().expect("replay_endpoint");
    (
        rank_endpoint(url, endpoint, 0).expect("endpoint"),
        rank_endpoint(url, replay, 0).expect("replay"),
    )
}

async fn generate(url: &str, prompt: &[u32]) {
    let body = json!({"input_ids": prompt, "sampling_params": {"max_new_tokens": 2}});
    assert_eq!(post(url, "/generate", body).await.0, 200);
}

/// Flushes the idle mock until the sink holds more than `known` records: the
/// subscription is live (ZMQ slow-joiner handshake, no sleeps).
async fn sync(url: &str, sink: &RecordingSink, known: usize) {
    let deadline = Deadline::after(WAIT);
    loop {
        let r = client()
            .post(format!("{url}/flush_cache"))
            .send()
            .await
            .expect("flush");
        assert_eq!(r.status(), 200, "mock must be idle while syncing");
        if sink
            .wait_until(Duration::from_millis(100), |r| r.len() > known)
            .await
        {
            return;
        }
        deadline.check("the subscription to become live");
    }
}

/// Position of the first stored page with exactly `tokens`, if any.
fn stored_at(events: &[KvEvent], tokens: &[u32]) -> Option<usize> {
    events.iter().position(|e| match e {
        KvEvent::Stored {
            token_ids,
            block_size,
            ..
        } => *block_size == PAGE && token_ids.chunks(PAGE as usize).any(|page| page == tokens),
        _ => false,
    })
}

/// The events among `records` (all of `WORKER`, rank 0).
fn events_in(records: &[Record]) -> Vec<KvEvent> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Event(w, rank, e) => {
                assert_eq!((*w, *rank), (WORKER, 0));
                Some(e.clone())
            }
            Record::Recovering(..) => None,
        })
        .collect()
}

fn events_of(sink: &RecordingSink) -> Vec<KvEvent> {
    sink.events()
        .into_iter()
        .map(|(w, rank, e)| {
            assert_eq!((w, rank), (WORKER, 0));
            e
        })
        .collect()
}

#[tokio::test]
async fn joining_mid_stream_replays_history_then_follows_live() {
    let _metrics = crate::EVENT_METRICS.write().await; // reads an event counter's increase
    let mock = start_mock("tcp://*:0", "tcp://*:0");
    // History before anyone subscribes: start (AllBlocksCleared) and one request.
    generate(&mock.url, &(1..=10).collect::<Vec<_>>()).await;
    let (endpoint, replay) = kv_endpoints(&mock.url).await;
    let sink = RecordingSink::new();
    let replays_before = metrics().replays.with_label_values(&["ok"]).get();
    let cfg = ZmqSourceConfig::new(WORKER, mock.url.clone(), 0, endpoint, PAGE)
        .with_replay(replay)
        .with_topic("kv");
    let _source = ZmqSource::spawn(&kvrouter::tasks::Tasks::new(), cfg, sink.clone(), None);
    sync(&mock.url, &sink, 0).await;

    // The first live batch (a flush, seq > 0) triggered a replay from 0: the
    // request's pages were applied before the flush cleared them.
    let events = events_of(&sink);
    let first_page = stored_at(&events, &[1, 2, 3, 4]).expect("history replayed");
    assert_eq!(
        events[0],
        KvEvent::Cleared,
        "sequence 0 is the start-up reset"
    );
    assert!(stored_at(&events, &[5, 6, 7, 8]).is_some());
    let flush = events
        .iter()
        .rposition(|e| *e == KvEvent::Cleared)
        .expect("flush");
    assert!(first_page < flush);
    assert!(metrics().replays.with_label_values(&["ok"]).get() > replays_before);

    generate(&mock.url, &(21..=28).collect::<Vec<_>>()).await;
    let live = sink
        .wait_until(WAIT, |r| {
            stored_at(&events_in(r), &[25, 26, 27, 28]).is_some()
        })
        .await;
    assert!(live, "live stores applied: {:?}", sink.records());
    assert!(!sink
        .records()
        .iter()
        .any(|r| matches!(r, Record::Recovering(..))));
}

#[tokio::test]
async fn mock_restart_on_the_same_ports_clears_the_rank() {
    let _metrics = crate::EVENT_METRICS.write().await; // reads an event counter's increase
    let (port, replay_port) = (support::free_port(), support::free_port());
    let (bind, bind_replay) = (format!("tcp://*:{port}"), format!("tcp://*:{replay_port}"));
    let mut first = start_mock(&bind, &bind_replay);
    let (endpoint, replay) = kv_endpoints(&first.url).await;
    let sink = RecordingSink::new();
    let cfg = ZmqSourceConfig::new(WORKER, "http://worker-a", 0, endpoint, PAGE)
        .with_replay(replay)
        .with_topic("kv");
    let _source = ZmqSource::spawn(&kvrouter::tasks::Tasks::new(), cfg, sink.clone(), None);
    sync(&first.url, &sink, 0).await;
    for start in [100u32, 200, 300, 400] {
        generate(&first.url, &(start..start + 8).collect::<Vec<_>>()).await;
    }
    assert!(
        sink.wait_until(WAIT, |r| stored_at(&events_in(r), &[404, 405, 406, 407])
            .is_some())
            .await
    );

    let restarts_before = metrics().restarts.get();
    first.kill();
    let second = start_mock(&bind, &bind_replay);
    let known = sink.records().len();
    sync(&second.url, &sink, known).await;
    generate(&second.url, &(500..508).collect::<Vec<_>>()).await;
    assert!(
        sink.wait_until(WAIT, |r| stored_at(&events_in(r), &[504, 505, 506, 507])
            .is_some())
            .await,
        "the restarted worker's stores are applied: {:?}",
        sink.records()
    );
    assert!(
        metrics().restarts.get() > restarts_before,
        "restart detected"
    );
    // Between the old worker's last store and the new worker's first, the rank was cleared.
    let events = events_of(&sink);
    let old = stored_at(&events, &[404, 405, 406, 407]).expect("old store");
    let new = stored_at(&events, &[504, 505, 506, 507]).expect("new store");
    assert!(events[old..new].contains(&KvEvent::Cleared));
}
