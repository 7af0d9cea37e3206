//! Namespaces, the HiCache host tier, `/v1/loads` and KV-event endpoints of an in-process
//! `sglang-mock` over loopback (ephemeral ports): `cached_tokens` of requests carrying
//! `lora_path`, `extra_key`, `cache_salt` (native and OpenAI routes), host-tier hits,
//! `/v1/loads` against SGLang's `LoadSnapshot.to_dict` shape, and events published on a
//! `"bind": true` host and on `0.0.0.0`, with `cache_salt` / `lora_name` on the wire.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: an unwrap is an assertion

use std::collections::BTreeSet;

use serde_json::{json, Value};
use zeromq::{Socket, SocketRecv, SubSocket};

use crate::support::inproc::{http, mock, post};

async fn cached(addr: &str, extra: Value) -> u64 {
    let mut body = json!({"input_ids": (1..=33).collect::<Vec<u32>>(),
                          "sampling_params": {"max_new_tokens": 1}});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let (st, v) = post(addr, "/generate", body).await;
    assert_eq!(st, 200, "{v}");
    v["meta_info"]["cached_tokens"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_miss_each_other() {
    let addr = mock(&["--lora-paths", "adA=/w/a", "adB"]).await;
    assert_eq!(cached(&addr, json!({})).await, 0);
    assert_eq!(cached(&addr, json!({})).await, 32, "plain hit");
    assert_eq!(
        cached(&addr, json!({"cache_salt": "t1"})).await,
        0,
        "salt misses plain"
    );
    assert_eq!(cached(&addr, json!({"cache_salt": "t1"})).await, 32);
    assert_eq!(
        cached(&addr, json!({"cache_salt": "t2"})).await,
        0,
        "other tenant"
    );
    assert_eq!(
        cached(&addr, json!({"cache_salt": ""})).await,
        32,
        "empty salt = none"
    );
    assert_eq!(cached(&addr, json!({"extra_key": "k"})).await, 0);
    assert_eq!(cached(&addr, json!({"extra_key": "k"})).await, 32);
    assert_eq!(
        cached(&addr, json!({"lora_path": "adA"})).await,
        0,
        "adapter misses base"
    );
    assert_eq!(cached(&addr, json!({"lora_path": "adA"})).await, 32);
    assert_eq!(cached(&addr, json!({"lora_path": "adB"})).await, 0);
    let (st, v) = post(
        &addr,
        "/generate",
        json!({"input_ids": [1, 2], "lora_path": "nope"}),
    )
    .await;
    assert_eq!(st, 400, "{v}");
    // OpenAI: `model: base:adapter` selects the adapter's pages; `cache_salt` too.
    let (st, v) = post(
        &addr,
        "/v1/completions",
        json!({"model": "mock-model:adA", "prompt": (1..=33).collect::<Vec<u32>>(), "max_tokens": 1}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
    let (_, v) = post(
        &addr,
        "/v1/completions",
        json!({"prompt": (1..=33).collect::<Vec<u32>>(), "max_tokens": 1, "cache_salt": "t3"}),
    )
    .await;
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lora_needs_enable_lora() {
    let addr = mock(&[]).await;
    let (st, v) = post(
        &addr,
        "/generate",
        json!({"input_ids": [1, 2], "lora_path": "a"}),
    )
    .await;
    assert_eq!(st, 400);
    assert!(v.to_string().contains("LoRA is not enabled"), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_tier_hit_is_cached_and_split() {
    // Device: 16 pages of 4 tokens; a 33-token prompt takes 9 pages with its output.
    let addr = mock(&[
        "--max-total-tokens",
        "64",
        "--enable-hierarchical-cache",
        "--hicache-write-policy",
        "write_back",
    ])
    .await;
    assert_eq!(cached(&addr, json!({})).await, 0);
    // Two other prompts push the first one's pages off the GPU (onto the host).
    for base in [100u32, 200] {
        let ids: Vec<u32> = (base..base + 33).collect();
        let (st, _) = post(
            &addr,
            "/generate",
            json!({"input_ids": ids, "sampling_params": {"max_new_tokens": 1}}),
        )
        .await;
        assert_eq!(st, 200);
    }
    let body = json!({"input_ids": (1..=33).collect::<Vec<u32>>(), "sampling_params": {"max_new_tokens": 1}});
    let (_, v) = post(&addr, "/generate", body).await;
    assert_eq!(v["meta_info"]["cached_tokens"], 32, "{v}");
    let d = &v["meta_info"]["cached_tokens_details"];
    assert_eq!(
        d["host"].as_u64().unwrap() + d["device"].as_u64().unwrap(),
        32,
        "{d}"
    );
    assert!(
        d["host"].as_u64().unwrap() > 0,
        "loaded back from the host: {d}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_loads_has_load_snapshot_shape() {
    let addr = mock(&[]).await;
    let want: Value =
        serde_json::from_str(include_str!("../data/server_info/v1_loads_rank.json")).unwrap();
    for (include, key) in [
        ("", "all"),
        ("core", "core"),
        ("memory,queues", "memory,queues"),
    ] {
        let (st, b) = http(&addr, "GET", &format!("/v1/loads?include={include}"), None).await;
        assert_eq!(st, 200, "{b}");
        let v: Value = serde_json::from_str(&b).unwrap();
        assert_eq!(v["version"], "0.5.23");
        let keys = |x: &Value| {
            x.as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect::<BTreeSet<_>>()
        };
        let got = &v["loads"][0];
        assert_eq!(keys(got), keys(&want[key]), "include={include}");
        for (k, sub) in want[key].as_object().unwrap() {
            if sub.is_object() {
                assert_eq!(keys(&got[k]), keys(sub), "{k}");
            }
        }
    }
    let (st, b) = http(&addr, "GET", "/v1/loads?include=bogus", None).await;
    assert_eq!(st, 400);
    let v: Value = serde_json::from_str(&b).unwrap();
    assert_eq!(v["detail"], want["bogus_error"]);
    let (st, b) = http(&addr, "GET", "/v1/loads?format=prometheus", None).await;
    assert_eq!(st, 200);
    assert!(
        b.contains(
            "# TYPE sglang_num_running_reqs gauge\nsglang_num_running_reqs{dp_rank=\"0\"} 0\n"
        ),
        "{b}"
    );
    assert!(b.contains("sglang_queues_waiting{dp_rank=\"0\"} 0"), "{b}");
    assert!(
        b.contains("sglang_disagg_kv_transfer_speed_gb_s{dp_rank=\"0\"} 0.0"),
        "{b}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_load_only_in_0_5_9_mode() {
    let addr = mock(&[]).await;
    assert_eq!(http(&addr, "GET", "/get_load", None).await.0, 404);
    let addr = mock(&["--sglang-version", "0.5.9"]).await;
    let (st, b) = http(&addr, "GET", "/get_load", None).await;
    assert_eq!(st, 200);
    assert_eq!(serde_json::from_str::<Value>(&b).unwrap()[0]["num_reqs"], 0);
}

/// Subscribes to the rank-0 publisher `/server_info` advertises (dialled on loopback) and
/// checks the store of a salted adapter request carries `cache_salt` and `lora_name`.
async fn salted_events_via(config: &str, expect_host: &str) {
    let addr = mock(&["--kv-events-config", config, "--lora-paths", "adA=/w/a"]).await;
    let (_, b) = http(&addr, "GET", "/server_info", None).await;
    let info: Value = serde_json::from_str(&b).unwrap();
    let kv = &info["kv_events"];
    assert_eq!(kv["endpoint_host"], expect_host, "{kv}");
    let port = kv["endpoint_port_base"].as_u64().unwrap();
    let mut sub = SubSocket::new();
    sub.subscribe("").await.unwrap();
    sub.connect(&format!("tcp://127.0.0.1:{port}"))
        .await
        .unwrap();
    // Slow joiner: flush until the subscription sees an AllBlocksCleared (bounded, so a
    // publisher nobody can reach fails the test instead of hanging it).
    for attempt in 0.. {
        assert!(
            attempt < 100,
            "no AllBlocksCleared from tcp://127.0.0.1:{port}"
        );
        http(&addr, "POST", "/flush_cache", None).await;
        let got = tokio::time::timeout(std::time::Duration::from_millis(200), sub.recv()).await;
        if let Ok(Ok(m)) = got {
            let payload = m.into_vec().pop().unwrap();
            if payload.windows(16).any(|w| w == b"AllBlocksCleared") {
                break;
            }
        }
    }
    let body = json!({"input_ids": (1..=9).collect::<Vec<u32>>(), "lora_path": "adA",
                      "cache_salt": "tenant-1", "sampling_params": {"max_new_tokens": 1}});
    let (st, _) = post(&addr, "/generate", body).await;
    assert_eq!(st, 200);
    let payload = loop {
        let got = tokio::time::timeout(std::time::Duration::from_secs(20), sub.recv()).await;
        let p = got
            .expect("a BlockStored")
            .unwrap()
            .into_vec()
            .pop()
            .unwrap();
        if p.windows(11).any(|w| w == b"BlockStored") {
            break p;
        }
    };
    assert!(
        payload.windows(8).any(|w| w == b"tenant-1"),
        "cache_salt on the wire"
    );
    assert!(
        payload.windows(9).any(|w| w == b"lora_name"),
        "lora_name on the wire"
    );
    assert!(
        payload.windows(3).any(|w| w == b"adA"),
        "the adapter's name"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_true_host_publishes() {
    salted_events_via(
        r#"{"publisher":"zmq","endpoint":"tcp://127.0.0.1:0","bind":true}"#,
        "127.0.0.1",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_address_binds_and_publishes() {
    salted_events_via(
        r#"{"publisher":"zmq","endpoint":"tcp://0.0.0.0:0"}"#,
        "0.0.0.0",
    )
    .await;
}
