//! sglang-mock KV events: SGLang's wire format (decoded independently with rmpv),
//! BlockStored with chained hashes, BlockRemoved on eviction, AllBlocksCleared on start
//! and flush, replay of missed batches, and per-DP-rank endpoints.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use serde_json::{json, Value};
use support::http::{client, get_json, post, post_json};
use support::sglang_wire::{decode_payload, Ev};
use support::zmq::{kv_config, port_of, replay, server_info, synced_sub};

fn events_cfg(topic: &str) -> String {
    json!({"publisher": "zmq", "endpoint": "tcp://*:0", "replay_endpoint": "tcp://*:0", "topic": topic}).to_string()
}

/// An `sglang-mock` with page 4, `--speedup speedup`, `extra` flags and ZMQ KV events on
/// `topic` (ephemeral event and replay ports).
fn events_mock(speedup: &str, topic: &str, extra: &[&str]) -> support::Proc {
    let cfg = events_cfg(topic);
    let mut args = vec!["--speedup", speedup, "--page-size", "4"];
    args.extend_from_slice(extra);
    args.extend(["--kv-events-config", &cfg]);
    support::mock(&args)
}

/// The KV event endpoint a mock reports in its `/server_info`.
async fn endpoint(url: &str) -> String {
    kv_config(url).await["endpoint"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A streaming `/generate` of `body` that has sent its first chunk: the response and that chunk.
async fn streaming(
    client: &reqwest::Client,
    url: &str,
    body: Value,
) -> (reqwest::Response, Vec<u8>) {
    let mut resp = post_json(client, &format!("{url}/generate"), &body).await;
    let first = resp.chunk().await.unwrap().unwrap().to_vec();
    (resp, first)
}

/// The rest of a streaming response, as text.
async fn rest_of(resp: &mut reqwest::Response) -> String {
    let mut rest = Vec::new();
    while let Some(c) = resp.chunk().await.unwrap() {
        rest.extend_from_slice(&c);
    }
    String::from_utf8(rest).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_events_match_sglang_format_and_hashes() {
    let m = events_mock("0", "kv", &[]);
    let kv = kv_config(&m.url).await;
    let ep = kv["endpoint"].as_str().unwrap().to_string();
    assert_ne!(port_of(&ep), 0, "actual port is reported");
    let mut sub = synced_sub(&m.url, &ep, "kv").await;

    let prompt: Vec<u32> = (1..=10).collect();
    let (s, body) = post(
        &m.url,
        "/generate",
        json!({"input_ids": prompt, "sampling_params": {"max_new_tokens": 3}}),
    )
    .await;
    assert_eq!(s, 200);
    let out: Vec<u64> = body["output_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let evs = sub
        .until(|e| e.iter().filter(|x| matches!(x, Ev::Stored { .. })).count() >= 2)
        .await;
    let stored: Vec<&Ev> = evs
        .iter()
        .filter(|e| matches!(e, Ev::Stored { .. }))
        .collect();
    // After prefill: 2 full pages of the prompt; at finish: prompt + output minus the last
    // token = 12 tokens -> one more page [9, 10, o1, o2] chained to the first node.
    let Ev::Stored {
        hashes: h1,
        parent: p1,
        tokens: t1,
        block_size,
        medium,
    } = stored[0]
    else {
        unreachable!()
    };
    assert_eq!(*p1, None);
    assert_eq!(t1, &(1..=8).collect::<Vec<u64>>());
    assert_eq!(*block_size, 4);
    assert_eq!(medium.as_deref(), Some("GPU"));
    assert_eq!(h1.len(), 2);
    // SGLang's hash of page [1,2,3,4] (python hashlib reference value).
    assert_eq!(h1[0], -3488128144981237669);
    let Ev::Stored {
        hashes: h2,
        parent: p2,
        tokens: t2,
        ..
    } = stored[1]
    else {
        unreachable!()
    };
    assert_eq!(*p2, Some(h1[1]));
    assert_eq!(t2, &vec![9, 10, out[0], out[1]]);
    assert_eq!(h2.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_emits_block_removed_and_later_misses() {
    // 16 pages of 4 tokens.
    let m = events_mock("0", "", &["--max-total-tokens", "64"]);
    let ep = endpoint(&m.url).await;
    let mut sub = synced_sub(&m.url, &ep, "").await;
    let prompt = |base: u32| -> Vec<u32> { (base..base + 32).collect() };
    let gen = |p: Vec<u32>| {
        post(
            &m.url,
            "/generate",
            json!({"input_ids": p, "sampling_params": {"max_new_tokens": 1}}),
        )
    };
    assert_eq!(gen(prompt(1000)).await.1["meta_info"]["cached_tokens"], 0);
    assert_eq!(gen(prompt(1000)).await.1["meta_info"]["cached_tokens"], 28);
    assert_eq!(gen(prompt(2000)).await.1["meta_info"]["cached_tokens"], 0);
    assert_eq!(gen(prompt(3000)).await.1["meta_info"]["cached_tokens"], 0);
    let evs = sub
        .until(|e| e.iter().any(|x| matches!(x, Ev::Removed { .. })))
        .await;
    let first_hashes = match evs.iter().find(|e| matches!(e, Ev::Stored { .. })) {
        Some(Ev::Stored { hashes, .. }) => hashes.clone(),
        _ => unreachable!(),
    };
    let removed: Vec<i64> = evs
        .iter()
        .filter_map(|e| {
            if let Ev::Removed { hashes } = e {
                Some(hashes.clone())
            } else {
                None
            }
        })
        .flatten()
        .collect();
    assert!(
        first_hashes.iter().all(|h| removed.contains(h)),
        "the LRU prompt was evicted"
    );
    assert_eq!(
        gen(prompt(1000)).await.1["meta_info"]["cached_tokens"],
        0,
        "evicted prompt misses"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_clears_and_refuses_when_busy() {
    let m = events_mock("1", "", &[]);
    let ep = endpoint(&m.url).await;
    let mut sub = synced_sub(&m.url, &ep, "").await;
    // A long streaming request keeps the server busy.
    let client = reqwest::Client::new();
    let (mut resp, first) = streaming(
        &client,
        &m.url,
        json!({"input_ids": [1, 2, 3, 4, 5], "rid": "busy", "stream": true, "sampling_params": {"max_new_tokens": 100000, "ignore_eos": true}}),
    )
    .await;
    assert!(first.starts_with(b"data: {"));
    let r = client
        .post(format!("{}/flush_cache", m.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400, "flush refused while a request runs");
    let (s, _) = post(&m.url, "/abort_request", json!({"rid": "busy"})).await;
    assert_eq!(s, 200);
    let rest = rest_of(&mut resp).await;
    assert!(
        rest.contains("\"type\":\"abort\""),
        "aborted stream ends with finish_reason abort"
    );
    assert!(rest.ends_with("data: [DONE]\n\n"));
    let r = client
        .get(format!("{}/flush_cache", m.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    sub.until(|e| e.contains(&Ev::Cleared)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_returns_missed_batches() {
    let m = events_mock("0", "t", &[]);
    let kv = kv_config(&m.url).await;
    let replay_ep = kv["replay_endpoint"].as_str().unwrap().to_string();
    for base in [0u32, 100, 200] {
        let p: Vec<u32> = (base..base + 9).collect();
        assert_eq!(
            post(
                &m.url,
                "/generate",
                json!({"input_ids": p, "sampling_params": {"max_new_tokens": 1}})
            )
            .await
            .0,
            200
        );
    }
    let all = replay(&replay_ep, 0).await;
    assert_eq!(all[0].seq, 0);
    assert_eq!(
        all[0].events,
        vec![Ev::Cleared],
        "the first batch after start is AllBlocksCleared"
    );
    assert!(
        all.windows(2).all(|w| w[1].seq == w[0].seq + 1),
        "contiguous sequence numbers"
    );
    assert!(all.iter().all(|b| b.rank == Some(0) && b.ts > 1.0e9));
    let stored_tokens: Vec<u64> = all
        .iter()
        .flat_map(|b| b.events.iter())
        .filter_map(|e| {
            if let Ev::Stored { tokens, .. } = e {
                Some(tokens[0])
            } else {
                None
            }
        })
        .collect();
    for base in [0u64, 100, 200] {
        assert!(stored_tokens.contains(&base), "prompt {base} was stored");
    }
    let tail = replay(&replay_ep, 2).await;
    assert_eq!(tail.first().map(|b| b.seq), Some(2));
    assert_eq!(tail.len(), all.len() - 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dp_ranks_publish_on_offset_ports() {
    let m = events_mock("0", "", &["--dp-size", "2"]);
    let info = server_info(&m.url).await;
    assert_eq!(info["dp_size"], 2);
    let kv = kv_config(&m.url).await;
    let ep0 = kv["endpoint"].as_str().unwrap().to_string();
    let ep1 = format!("tcp://127.0.0.1:{}", port_of(&ep0) + 1);
    let replay1 = format!(
        "tcp://127.0.0.1:{}",
        port_of(kv["replay_endpoint"].as_str().unwrap()) + 1
    );
    let (s, body) = post(&m.url, "/generate", json!({"input_ids": [7, 7, 7, 7, 7, 7], "routed_dp_rank": 1, "sampling_params": {"max_new_tokens": 1}})).await;
    assert_eq!(s, 200);
    assert_eq!(body["meta_info"]["dp_rank"], 1);
    let batches = replay(&replay1, 0).await;
    assert!(batches.iter().all(|b| b.rank == Some(1)));
    assert!(batches
        .iter()
        .any(|b| b.events.iter().any(|e| matches!(e, Ev::Stored { .. }))));
    // Rank 1 publishes too (handshake on its own port).
    let _sub1 = synced_sub(&m.url, &ep1, "").await;
    let (s, _) = post(
        &m.url,
        "/generate",
        json!({"input_ids": [1], "routed_dp_rank": 5}),
    )
    .await;
    assert_eq!(s, 400, "out-of-range rank is rejected");
    // Without a rank, requests go round-robin.
    let mut ranks = Vec::new();
    for _ in 0..4 {
        let body = json!({"input_ids": [3, 4], "sampling_params": {"max_new_tokens": 1}});
        let (_, b) = post(&m.url, "/generate", body).await;
        ranks.push(b["meta_info"]["dp_rank"].as_u64().unwrap());
    }
    ranks.sort();
    assert_eq!(ranks, [0, 0, 1, 1]);
    let load: serde_json::Value = get_json(&client(), &format!("{}/v1/loads", m.url)).await;
    assert_eq!(load["loads"].as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weight_update_drains_running_requests_then_clears() {
    let m = events_mock("1", "", &[]);
    let ep = endpoint(&m.url).await;
    let mut sub = synced_sub(&m.url, &ep, "").await;
    let client = reqwest::Client::new();
    let (mut resp, _) = streaming(
        &client,
        &m.url,
        json!({"input_ids": (1..=9).collect::<Vec<u32>>(), "stream": true, "sampling_params": {"max_new_tokens": 40}}),
    )
    .await;
    let (s, r) = post(
        &m.url,
        "/update_weights_from_disk",
        json!({"model_path": "/new"}),
    )
    .await;
    assert_eq!((s, r["success"].clone()), (200, json!(true)));
    let rest = rest_of(&mut resp).await;
    assert!(
        rest.contains("\"completion_tokens\":40"),
        "the running request finished, not aborted"
    );
    assert!(
        rest.contains("\"weight_version\":\"default\""),
        "it finished on the old weights"
    );
    let evs = sub.until(|e| e.contains(&Ev::Cleared)).await;
    let cleared = evs.iter().position(|e| *e == Ev::Cleared).unwrap();
    assert!(
        evs[..cleared]
            .iter()
            .any(|e| matches!(e, Ev::Stored { .. })),
        "finish stored before the flush"
    );
    let info: serde_json::Value = get_json(&client, &format!("{}/model_info", m.url)).await;
    assert_eq!(info["weight_version"], "default-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_mode_publishes_to_a_bound_subscriber() {
    use zeromq::{Socket, SocketRecv, SubSocket};
    // Centralised mode: the consumer binds, the worker's endpoint has a host, so it connects.
    let mut sub = SubSocket::new();
    let bound = sub.bind("tcp://127.0.0.1:0").await.unwrap().to_string();
    sub.subscribe("").await.unwrap();
    let cfg = json!({"publisher": "zmq", "endpoint": bound}).to_string();
    let m = support::mock(&["--speedup", "0", "--kv-events-config", &cfg]);
    let client = reqwest::Client::new();
    for _ in 0..100 {
        let r = client
            .post(format!("{}/flush_cache", m.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        if let Ok(msg) =
            tokio::time::timeout(std::time::Duration::from_millis(100), sub.recv()).await
        {
            let frames = msg.unwrap().into_vec();
            assert_eq!(frames.len(), 3);
            let (_, events, rank) = decode_payload(&frames[2]);
            assert_eq!(rank, Some(0));
            assert!(events.contains(&Ev::Cleared));
            return;
        }
    }
    panic!("no event reached the bound subscriber");
}
