//! NATS end to end against a real `nats-server`: one router relays a worker's ZMQ
//! stream (with a lost batch and a worker restart) to NATS; two replica consumers,
//! which know the worker under different `WorkerId`s, must converge to the exact
//! same event sequence as the relay. Dynamo `RouterEvent`s (JSON and event-plane
//! msgpack envelopes) are consumed the same way.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use kvrouter::events::nats_envelope::{
    encode_headers, relay_subject, RelayedBatch, DEFAULT_RELAY_PREFIX,
};
use kvrouter::events::{
    KvEventSink, NatsConsumer, NatsConsumerConfig, NatsRelay, Record, RecordingSink, SourceHandle,
    WorkerKey, WorkerResolver, ZmqSource, ZmqSourceConfig,
};
use kvrouter::workers::{Rank, WorkerId};
use kvrouter_index::KvEvent;
use serde_json::json;
use support::fake_publisher::{handshake, FakePublisher};
use support::nats::NatsServer;
use support::sglang_wire::{batch, cleared, stored};

const PAGE: u32 = 2;
const WAIT: Duration = Duration::from_secs(10);
const WORKER_URL: &str = "http://127.0.0.1:30000";
const DYNAMO_WORKER: u64 = 7;

/// A replica's view of the fleet: the worker URL and Dynamo instance 7 under its own ids.
fn resolver(url_id: u32, dynamo_id: u32) -> Arc<dyn WorkerResolver> {
    Arc::new(move |key: WorkerKey<'_>| match key {
        WorkerKey::Url(url) if url == WORKER_URL => Some(WorkerId(url_id)),
        WorkerKey::Dynamo(DYNAMO_WORKER) => Some(WorkerId(dynamo_id)),
        _ => None,
    })
}

async fn replica(
    server: &NatsServer,
    url_id: u32,
    dynamo_id: u32,
) -> (Arc<RecordingSink>, SourceHandle) {
    let sink = RecordingSink::new();
    let handle = NatsConsumer::start(
        &kvrouter::tasks::Tasks::new(),
        server.client().await,
        NatsConsumerConfig::new(PAGE),
        resolver(url_id, dynamo_id),
        sink.clone() as Arc<dyn KvEventSink>,
    )
    .await
    .expect("start NATS consumer");
    (sink, handle)
}

/// A replica-independent view of the records: worker ids dropped.
fn normalized(records: &[Record]) -> Vec<(Rank, Option<KvEvent>, Option<bool>)> {
    records
        .iter()
        .map(|r| match r {
            Record::Event(_, rank, e) => (*rank, Some(e.clone()), None),
            Record::Recovering(_, rank, on) => (*rank, None, Some(*on)),
        })
        .collect()
}

#[tokio::test]
async fn relayed_stream_converges_on_two_replicas() {
    let _metrics = crate::EVENT_METRICS.read().await; // moves the event counters
    let server = NatsServer::start().await;
    let (replica_b, _b) = replica(&server, 10, 11).await;
    let (replica_c, _c) = replica(&server, 20, 21).await;

    // A relayed batch of a worker nobody knows is skipped by both replicas (flushed
    // first, so it reaches them before anything from the relay).
    let stranger = RelayedBatch {
        worker_url: "http://10.9.9.9:1".into(),
        rank: 0,
        seq: 0,
        reset: None,
        payload: batch(vec![stored(99, &[1, 2])]).into(),
    };
    let client = server.client().await;
    client
        .publish_with_headers(
            relay_subject(DEFAULT_RELAY_PREFIX, &stranger.worker_url, 0),
            encode_headers(&stranger),
            stranger.payload.clone(),
        )
        .await
        .expect("publish");
    client.flush().await.expect("flush");

    let relay = NatsRelay::start(
        &kvrouter::tasks::Tasks::new(),
        server.client().await,
        DEFAULT_RELAY_PREFIX,
    );
    let mut publisher = FakePublisher::bind("").await;
    let endpoint = publisher.endpoint.clone();
    let relay_sink = RecordingSink::new();
    let cfg = ZmqSourceConfig::new(WorkerId(1), WORKER_URL, 0, endpoint.clone(), PAGE);
    let _zmq = ZmqSource::spawn(
        &kvrouter::tasks::Tasks::new(),
        cfg,
        relay_sink.clone(),
        Some(relay.sender()),
    );

    handshake(
        &mut publisher,
        &relay_sink,
        batch(vec![cleared()]),
        1,
        "relay",
    )
    .await;
    publisher.publish(1, batch(vec![stored(1, &[1, 2])])).await;
    publisher.lose(2, batch(vec![stored(2, &[3, 4])])); // lost, no replay endpoint: gap
    publisher.publish(3, batch(vec![stored(3, &[5, 6])])).await;
    publisher
        .publish(4, batch(vec![stored(4, &[7, 8, 9]), stored(5, &[9, 10])]))
        .await; // first is a page mismatch
    publisher.shut_down().await; // worker restart
    let mut restarted = FakePublisher::bind_at(&endpoint, "tcp://127.0.0.1:0", "").await;
    let before_restart = relay_sink.records().len();
    handshake(
        &mut restarted,
        &relay_sink,
        batch(vec![stored(40, &[1, 2])]),
        before_restart + 2,
        "relay",
    )
    .await;
    restarted.publish(1, batch(vec![stored(41, &[3, 4])])).await;

    let expected_relay = 10; // 8 events + recovering on, then off at the restart
    assert!(
        relay_sink
            .wait_until(WAIT, |r| r.len() >= expected_relay)
            .await,
        "relay: {:?}",
        relay_sink.records()
    );
    let reference = normalized(&relay_sink.records());
    let stored_hashes: Vec<_> = relay_sink
        .events()
        .into_iter()
        .map(|(_, _, e)| match e {
            KvEvent::Stored { block_hashes, .. } => Some(block_hashes[0]),
            _ => None,
        })
        .collect();
    assert_eq!(
        stored_hashes,
        vec![
            None,
            Some(1),
            None,
            Some(3),
            Some(5),
            None,
            Some(40),
            Some(41)
        ]
    );

    for (name, sink) in [("b", &replica_b), ("c", &replica_c)] {
        let converged = sink.wait_until(WAIT, |r| r.len() >= reference.len()).await;
        assert!(converged, "replica {name} has {:?}", sink.records());
        assert_eq!(
            normalized(&sink.records()),
            reference,
            "replica {name} diverged"
        );
    }
    assert!(replica_b
        .events()
        .iter()
        .all(|(w, _, _)| *w == WorkerId(10)));
    assert!(replica_c
        .events()
        .iter()
        .all(|(w, _, _)| *w == WorkerId(20)));
}

fn dynamo_event(event_id: u64, data: serde_json::Value) -> serde_json::Value {
    json!({"worker_id": DYNAMO_WORKER, "event": {"event_id": event_id, "dp_rank": 1, "data": data}})
}

/// Dynamo's event-plane envelope (msgpack, named fields) around a msgpack `RouterEvent`.
fn envelope(event: &serde_json::Value, sequence: u64) -> Vec<u8> {
    let payload = rmp_serde::to_vec_named(event).expect("encode");
    let v = rmpv::Value::Map(vec![
        ("topic".into(), "kv-events".into()),
        ("publisher_id".into(), 1234.into()),
        ("sequence".into(), sequence.into()),
        ("published_at".into(), 1_700_000_000_000u64.into()),
        ("payload".into(), rmpv::Value::Binary(payload)),
    ]);
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &v).expect("encode");
    out
}

#[tokio::test]
async fn dynamo_router_events_reach_both_replicas() {
    let _metrics = crate::EVENT_METRICS.read().await; // moves the event counters
    let server = NatsServer::start().await;
    let (replica_b, _b) = replica(&server, 10, 11).await;
    let (replica_c, _c) = replica(&server, 20, 21).await;
    let client = server.client().await;
    // Dynamo 1.6.1's endpoint-scoped subject (the older 5-token form is subscribed too).
    let subject = "namespace.dynamo.component.backend.endpoint.generate.kv-events";
    let stored = dynamo_event(
        1,
        json!({"stored": {"parent_hash": null, "blocks": [
        {"block_hash": 500, "tokens_hash": 14643705804678351452u64},
        {"block_hash": 501, "tokens_hash": 16777012769546811212u64}]}}),
    );
    let removed = dynamo_event(2, json!({"removed": {"block_hashes": [501]}}));
    let after_gap = dynamo_event(
        4,
        json!({"stored": {"parent_hash": 500, "blocks": [{"block_hash": 502, "tokens_hash": 1}]}}),
    );
    let unknown = json!({"worker_id": 8, "event": {"event_id": 1, "data": "cleared"}});
    client
        .publish(subject, serde_json::to_vec(&stored).unwrap().into())
        .await
        .unwrap();
    client
        .publish(subject, envelope(&removed, 2).into())
        .await
        .unwrap();
    client
        .publish(subject, serde_json::to_vec(&unknown).unwrap().into())
        .await
        .unwrap();
    client
        .publish(subject, b"not an event".to_vec().into())
        .await
        .unwrap();
    client
        .publish(subject, serde_json::to_vec(&after_gap).unwrap().into())
        .await
        .unwrap();
    client.flush().await.unwrap();

    let expected = vec![
        Record::Event(
            WorkerId(11),
            1,
            KvEvent::StoredHashed {
                parent: None,
                block_hashes: vec![500, 501],
                local_hashes: vec![14643705804678351452, 16777012769546811212],
            },
        ),
        Record::Event(
            WorkerId(11),
            1,
            KvEvent::Removed {
                block_hashes: vec![501],
            },
        ),
        // event 3 is missing: the rank is cleared and recovering, then event 4 applies.
        Record::Event(WorkerId(11), 1, KvEvent::Cleared),
        Record::Recovering(WorkerId(11), 1, true),
        Record::Event(
            WorkerId(11),
            1,
            KvEvent::StoredHashed {
                parent: Some(500),
                block_hashes: vec![502],
                local_hashes: vec![1],
            },
        ),
    ];
    assert!(
        replica_b
            .wait_until(WAIT, |r| r.len() >= expected.len())
            .await,
        "b: {:?}",
        replica_b.records()
    );
    assert_eq!(replica_b.records(), expected);
    assert!(
        replica_c
            .wait_until(WAIT, |r| r.len() >= expected.len())
            .await,
        "c: {:?}",
        replica_c.records()
    );
    assert_eq!(normalized(&replica_c.records()), normalized(&expected));
}
