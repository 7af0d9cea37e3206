//! DP ranks in KV mode against a real `sglang-mock --dp-size 2`: the router scores
//! (worker, rank) units and sends the request to the rank holding its prefix by injecting
//! `routed_dp_rank`; a body that already names a rank keeps it.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::http::client;
use support::kv::*;

async fn post(c: &reqwest::Client, base: &str, body: Value) -> Value {
    let r = support::http::post_json(c, &format!("{base}/generate"), &body).await;
    let status = r.status().as_u16();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    assert_eq!(status, 200, "{base}: {v}");
    v
}

fn rank_blocks(v: &Value, rank: u64) -> u64 {
    v["units"]
        .as_array()
        .and_then(|u| u.iter().find(|x| x["rank"] == rank))
        .and_then(|x| x["blocks"].as_u64())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_lands_on_the_rank_holding_its_prefix() {
    // Rank r publishes on port + r: both bases need their next port free too.
    let (zmq, replay) = loop {
        let (a, b) = (
            support::procs::free_port_range(2),
            support::procs::free_port_range(2),
        );
        if a.abs_diff(b) >= 2 {
            break (a, b);
        }
    };
    let cfg = format!(
        r#"{{"publisher":"zmq","endpoint":"tcp://*:{zmq}","replay_endpoint":"tcp://*:{replay}"}}"#
    );
    let w = support::mock(&[
        "--page-size",
        "4",
        "--speedup",
        "0",
        "--dp-size",
        "2",
        "--kv-events-config",
        &cfg,
    ]);
    let router = kv_router(&[&w.url], &[]);
    let c = client();
    wait_sources(&c, &router.url, 2).await;
    // Make both rank subscriptions live (slow joiner), one small prompt per rank.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut seed = 0;
    loop {
        let v = debug_index(&c, &router.url).await;
        if rank_blocks(&v, 0) > 0 && rank_blocks(&v, 1) > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "ranks never live: {v}"
        );
        seed += 1;
        for rank in 0..2 {
            post(
                &c,
                &w.url,
                json!({"input_ids": prompt(9000 + seed, 8), "routed_dp_rank": rank,
                "sampling_params": {"max_new_tokens": 1}}),
            )
            .await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = rank_blocks(&debug_index(&c, &router.url).await, 1);
    let p = prompt(21, 64);
    post(
        &c,
        &w.url,
        json!({"input_ids": p, "routed_dp_rank": 1,
        "sampling_params": {"max_new_tokens": 1}}),
    )
    .await;
    wait_index(&c, &router.url, "rank 1 blocks", |v| {
        rank_blocks(v, 1) >= before + 16
    })
    .await;
    for turn in 0..3u32 {
        let mut ids = p.clone();
        ids.extend(prompt(300 + turn, 8));
        let out = post(
            &c,
            &router.url,
            json!({"input_ids": ids,
            "sampling_params": {"max_new_tokens": 1}}),
        )
        .await;
        assert_eq!(out["meta_info"]["dp_rank"], 1, "{out}");
        assert!(
            out["meta_info"]["cached_tokens"].as_u64().unwrap_or(0) >= 60,
            "{out}"
        );
    }
    // The client's own rank wins.
    let out = post(
        &c,
        &router.url,
        json!({"input_ids": p, "routed_dp_rank": 0,
        "sampling_params": {"max_new_tokens": 1}}),
    )
    .await;
    assert_eq!(out["meta_info"]["dp_rank"], 0, "{out}");
}
