//! ZMQ ingestion end to end: a real PUB + ROUTER replay publisher (SGLang wire
//! format) feeding `ZmqSource`, showing contiguous application, gap -> replay,
//! gap without replay -> clear + recovering, and worker restart -> clear.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use std::time::Duration;

use kvrouter::events::{Record, RecordingSink, ZmqSource, ZmqSourceConfig};
use kvrouter::workers::WorkerId;
use kvrouter_index::KvEvent;
use support::fake_publisher::{handshake, FakePublisher};
use support::sglang_wire::{batch, cleared, removed, stored};

const PAGE: u32 = 2;
const WAIT: Duration = Duration::from_secs(10);
const WORKER: WorkerId = WorkerId(3);

/// Engine hashes of the `Stored` events (and `None` for each `Cleared`), in order.
fn timeline(sink: &RecordingSink) -> Vec<Option<u64>> {
    sink.events()
        .into_iter()
        .filter_map(|(w, rank, e)| {
            assert_eq!((w, rank), (WORKER, 0));
            match e {
                KvEvent::Stored { block_hashes, .. } => Some(Some(block_hashes[0])),
                KvEvent::Removed { .. } => None,
                KvEvent::Cleared => Some(None),
                other => panic!("unexpected {other:?}"),
            }
        })
        .collect()
}

fn config(publisher: &FakePublisher) -> ZmqSourceConfig {
    ZmqSourceConfig::new(
        WORKER,
        "http://127.0.0.1:1",
        0,
        publisher.endpoint.clone(),
        PAGE,
    )
    .with_topic("kv-events")
}

async fn wait_for_events(sink: &RecordingSink, n: usize) -> Vec<Option<u64>> {
    let reached = sink
        .wait_until(WAIT, |r| {
            r.iter().filter(|r| matches!(r, Record::Event(..))).count() >= n
        })
        .await;
    assert!(reached, "expected {n} events, got {:?}", sink.records());
    timeline(sink)
}

#[tokio::test]
async fn gap_is_filled_from_the_replay_endpoint() {
    let _metrics = crate::EVENT_METRICS.read().await; // moves the event counters
    let mut publisher = FakePublisher::bind("kv-events").await;
    let sink = RecordingSink::new();
    let cfg = config(&publisher).with_replay(publisher.replay_endpoint.clone());
    let _source = ZmqSource::spawn(&kvrouter::tasks::Tasks::new(), cfg, sink.clone(), None);
    handshake(&mut publisher, &sink, batch(vec![cleared()]), 1, "source").await;

    publisher.publish(1, batch(vec![stored(11, &[1, 2])])).await;
    publisher.lose(2, batch(vec![stored(12, &[3, 4])]));
    publisher.lose(3, batch(vec![stored(13, &[5, 6]), removed(11)]));
    publisher.publish(4, batch(vec![stored(14, &[7, 8])])).await;
    publisher
        .publish(5, batch(vec![stored(15, &[9, 10])]))
        .await;

    let events = wait_for_events(&sink, 6).await;
    assert_eq!(
        events,
        vec![None, Some(11), Some(12), Some(13), Some(14), Some(15)]
    );
    let removed_count = sink
        .events()
        .iter()
        .filter(|(_, _, e)| matches!(e, KvEvent::Removed { .. }))
        .count();
    assert_eq!(removed_count, 1);
    assert!(!sink
        .records()
        .iter()
        .any(|r| matches!(r, Record::Recovering(..))));
}

#[tokio::test]
async fn gap_without_replay_clears_the_rank_until_a_cache_reset() {
    let _metrics = crate::EVENT_METRICS.read().await; // moves the event counters
    let mut publisher = FakePublisher::bind("").await;
    let sink = RecordingSink::new();
    let cfg = ZmqSourceConfig::new(
        WORKER,
        "http://127.0.0.1:1",
        0,
        publisher.endpoint.clone(),
        PAGE,
    );
    let _source = ZmqSource::spawn(&kvrouter::tasks::Tasks::new(), cfg, sink.clone(), None);
    handshake(&mut publisher, &sink, batch(vec![cleared()]), 1, "source").await;

    publisher.publish(1, batch(vec![stored(21, &[1, 2])])).await;
    publisher.lose(2, batch(vec![removed(21)]));
    publisher.publish(3, batch(vec![stored(23, &[5, 6])])).await;
    let events = wait_for_events(&sink, 4).await;
    // The lost removal must not leave block 21 behind: the rank is cleared first.
    assert_eq!(events, vec![None, Some(21), None, Some(23)]);
    assert!(sink
        .records()
        .contains(&Record::Recovering(WORKER, 0, true)));

    publisher.publish(4, batch(vec![cleared()])).await;
    assert!(
        sink.wait_until(WAIT, |r| r.contains(&Record::Recovering(WORKER, 0, false)))
            .await,
        "a cache reset ends recovery: {:?}",
        sink.records()
    );
}

#[tokio::test]
async fn worker_restart_clears_the_rank_and_restarts_the_cursor() {
    let _metrics = crate::EVENT_METRICS.read().await; // moves the event counters
    let mut publisher = FakePublisher::bind("").await;
    let endpoint = publisher.endpoint.clone();
    let sink = RecordingSink::new();
    let cfg = ZmqSourceConfig::new(WORKER, "http://127.0.0.1:1", 0, endpoint.clone(), PAGE);
    let _source = ZmqSource::spawn(&kvrouter::tasks::Tasks::new(), cfg, sink.clone(), None);
    handshake(&mut publisher, &sink, batch(vec![cleared()]), 1, "source").await;
    for seq in 1..=5u64 {
        publisher
            .publish(seq, batch(vec![stored(30 + seq as i64, &[1, 2])]))
            .await;
    }
    wait_for_events(&sink, 6).await;

    // The worker restarts: same port, sequence back to 0, first batch a store.
    publisher.shut_down().await;
    let mut restarted = FakePublisher::bind_at(&endpoint, "tcp://127.0.0.1:0", "").await;
    handshake(
        &mut restarted,
        &sink,
        batch(vec![stored(40, &[1, 2])]),
        8,
        "source",
    )
    .await;
    restarted.publish(1, batch(vec![stored(41, &[3, 4])])).await;

    let events = wait_for_events(&sink, 9).await;
    assert_eq!(
        events,
        vec![
            None,
            Some(31),
            Some(32),
            Some(33),
            Some(34),
            Some(35),
            None,
            Some(40),
            Some(41)
        ]
    );
}
