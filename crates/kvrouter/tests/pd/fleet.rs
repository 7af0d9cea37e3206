//! PD disaggregation end to end (docs/pd.md): a router started with `--pd-disaggregation
//! --prefill URL PORT --decode URL` over a fleet of PD fakes (`support::pd_fake`, SGLang's
//! prefill/decode contract: 400 without a room, each leg waiting for its peer of the same room).
//! Covers `/generate`, chat and completions (plain, streamed, batched), byte-exact bodies but
//! for the injected fields, the logprob merge, a failed leg cancelling the other with a 5xx
//! naming it, GRPO siblings sharing one prefill worker, DP ranks and readiness.
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

use crate::support;

use serde_json::{json, Value};
use support::admin::wait_ready;
use support::http::post_bytes;
use support::pd_fake::{Fail, PdFake, PdFleet};
use support::procs::start_router;
use support::wait::wait_for;
use support::Proc;

async fn router_over(fleet: &PdFleet, extra: &[&str]) -> Proc {
    let mut args: Vec<String> = fleet.router_args();
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = start_router(&refs);
    wait_ready(&r.url, "the PD router to be ready").await;
    r
}

/// The fields a leg body has beyond the client's `sent` bytes: everything else must be the
/// client's bytes exactly, with the injection just before the closing brace.
fn injected(sent: &str, got: &[u8]) -> Value {
    let sent = sent.as_bytes();
    let close = sent.iter().rposition(|b| *b == b'}').unwrap();
    assert_eq!(&got[..close], &sent[..close], "bytes before the injection");
    let tail = &sent[close..];
    assert!(got.ends_with(tail), "bytes after the injection");
    let added = std::str::from_utf8(&got[close..got.len() - tail.len()]).unwrap();
    let added = added.strip_prefix(',').unwrap_or(added);
    serde_json::from_str(&format!("{{{added}}}")).unwrap()
}

/// The one body each of the fleet's prefill and decode fakes got last, and which fakes.
fn last_pair(fleet: &PdFleet) -> ((usize, Vec<u8>), (usize, Vec<u8>)) {
    let last = |fakes: &[PdFake]| {
        fakes
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.bodies().last().map(|(_, b)| (i, b.to_vec())))
            .max_by_key(|(_, b)| b.len())
            .unwrap()
    };
    (last(&fleet.prefill), last(&fleet.decode))
}

fn clear(fleet: &PdFleet) {
    for f in fleet.prefill.iter().chain(&fleet.decode) {
        let mut st = f.state.lock();
        st.bodies.clear();
        st.responses.clear();
    }
}

const IDS: &str = "[11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43]";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2p2d_fleet_serves_every_route_plain_streamed_and_batched() {
    let fleet = PdFleet::start(2, 2, 1, 1).await;
    let r = router_over(&fleet, &[]).await;
    let cases: Vec<(&str, String, usize)> = vec![
        ("/generate", format!(r#"{{"input_ids": {IDS},  "sampling_params": {{"max_new_tokens": 2}}, "x_unknown": {{"keep": "me"}} }}"#), 1),
        ("/generate", format!(r#"{{"input_ids": {IDS}, "stream": true}}"#), 1),
        ("/generate", r#"{"input_ids": [[1,2,3],[4,5,6]], "sampling_params": {"max_new_tokens": 2}}"#.to_string(), 2),
        ("/generate", r#"{"text": ["a", "b", "c"]}"#.to_string(), 3),
        ("/v1/chat/completions", r#"{"model": "pd-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}"#.to_string(), 1),
        ("/v1/chat/completions", r#"{"model": "pd-model", "messages": [{"role": "user", "content": "hi"}], "stream": true}"#.to_string(), 1),
        ("/v1/chat/completions", r#"{"model": "pd-model", "messages": [{"role": "user", "content": "hi"}], "n": 2}"#.to_string(), 2),
        ("/v1/completions", r#"{"model": "pd-model", "prompt": "hello", "max_tokens": 2}"#.to_string(), 1),
        ("/v1/completions", r#"{"model": "pd-model", "prompt": "hello", "stream": true}"#.to_string(), 1),
        ("/v1/completions", r#"{"model": "pd-model", "prompt": ["a", "b"]}"#.to_string(), 2),
    ];
    for (path, body, rooms) in cases {
        clear(&fleet);
        let (status, headers, got) = post_bytes(&r.url, path, &body).await;
        assert_eq!(
            status,
            200,
            "{path} {body}: {}",
            String::from_utf8_lossy(&got)
        );
        assert_eq!(
            headers["x-fake-role"], "decode",
            "{path}: the decode response"
        );
        let ((p, pbody), (d, dbody)) = last_pair(&fleet);
        assert_eq!(
            fleet.decode[d].responses().last().map(|b| b.to_vec()),
            Some(got.clone()),
            "{path} {body}: the client gets the decode bytes"
        );
        assert_eq!(headers["x-kvrouter-worker"], fleet.decode[d].url.as_str());
        let (pi, di) = (injected(&body, &pbody), injected(&body, &dbody));
        assert_eq!(pi, di, "{path}: both legs get the same fields");
        let port = 8998 + p as u64;
        if rooms == 1 && !body.contains("[[") && !body.contains(r#"["a""#) {
            assert_eq!(pi["bootstrap_host"], "127.0.0.1");
            assert_eq!(pi["bootstrap_port"], port);
            assert!(pi["bootstrap_room"].as_u64().unwrap() < 1 << 63);
        } else {
            assert_eq!(
                pi["bootstrap_host"],
                json!(vec!["127.0.0.1"; rooms]),
                "{path} {body}"
            );
            assert_eq!(pi["bootstrap_port"], json!(vec![port; rooms]));
            let list = pi["bootstrap_room"].as_array().unwrap();
            assert_eq!(list.len(), rooms);
            assert_ne!(list[0], list[1], "one room per prompt");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefill_input_logprobs_are_prepended_plain_and_streamed() {
    let fleet = PdFleet::start(1, 1, 1, 1).await;
    let r = router_over(&fleet, &[]).await;
    let body = r#"{"input_ids": [5, 6, 7], "return_logprob": true}"#;
    let (status, _, got) = post_bytes(&r.url, "/generate", body).await;
    assert_eq!(status, 200);
    let decode_sent = String::from_utf8(fleet.decode[0].responses()[0].to_vec()).unwrap();
    let got = String::from_utf8(got).unwrap();
    let merged =
        r#""input_token_logprobs":[[null,5,null],[-0.25,6,null],[-0.25,7,null],[-0.5,999,null]]"#;
    assert_eq!(
        got,
        decode_sent.replace(r#""input_token_logprobs":[[-0.5,999,null]]"#, merged),
        "only the logprob list changes"
    );
    let body = r#"{"input_ids": [5, 6, 7], "return_logprob": true, "stream": true}"#;
    let (status, headers, got) = post_bytes(&r.url, "/generate", body).await;
    assert_eq!(status, 200);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let got = String::from_utf8(got).unwrap();
    let decode_sent = String::from_utf8(fleet.decode[0].responses()[1].to_vec()).unwrap();
    assert_eq!(
        got,
        decode_sent.replace(r#""input_token_logprobs":[[-0.5,999,null]]"#, merged)
    );
    assert!(got.ends_with("data: [DONE]\n\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_leg_cancels_the_other_and_the_client_gets_a_5xx_naming_it() {
    let fleet = PdFleet::start(1, 1, 1, 1).await;
    let r = router_over(
        &fleet,
        &[
            "--retry-max-retries",
            "1",
            "--cb-failure-threshold",
            "100",
            "--health-failure-threshold",
            "100",
        ],
    )
    .await;
    let body = r#"{"input_ids": [1, 2, 3]}"#;
    // The decode connection breaks: the prefill (waiting for its decode peer) is cancelled.
    fleet.decode[0].set_fail(Fail::Drop);
    let (status, headers, got) = post_bytes(&r.url, "/generate", body).await;
    let v: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(status, 502, "{v}");
    assert_eq!(v["error"]["code"], "decode_unavailable", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("decode leg"),
        "{v}"
    );
    assert_eq!(headers["x-kvrouter-worker"], fleet.decode[0].url.as_str());
    wait_for("the prefill leg to be cancelled", || async {
        // The leg may be cancelled before its request reached the fake: what must hold is that
        // no request that did reach it is left waiting for a peer.
        fleet.prefill[0].cancelled() as usize >= fleet.prefill[0].served()
    })
    .await;
    // The prefill answers 500: 502 naming the prefill, and the waiting decode is cancelled.
    fleet.decode[0].set_fail(Fail::None);
    fleet.prefill[0].set_fail(Fail::Status(500));
    let (served0, cancelled0) = (fleet.decode[0].served(), fleet.decode[0].cancelled());
    let (status, headers, got) = post_bytes(&r.url, "/generate", body).await;
    let v: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(status, 502, "{v}");
    assert_eq!(v["error"]["code"], "prefill_server_error", "{v}");
    assert_eq!(headers["x-kvrouter-worker"], fleet.prefill[0].url.as_str());
    wait_for("the decode leg to be cancelled", || async {
        // The leg may be cancelled before its request reached the fake: what must hold is that
        // no request that did reach it is left waiting for a peer.
        (fleet.decode[0].cancelled() - cancelled0) as usize >= fleet.decode[0].served() - served0
    })
    .await;
    // A prefill 400 keeps its status.
    fleet.prefill[0].set_fail(Fail::Status(400));
    let (status, _, got) = post_bytes(&r.url, "/generate", body).await;
    let v: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("prefill_bad_request")),
        "{v}"
    );
    // Healthy again: served.
    fleet.prefill[0].set_fail(Fail::None);
    assert_eq!(post_bytes(&r.url, "/generate", body).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_takes_a_new_pair_and_a_new_room() {
    let fleet = PdFleet::start(2, 1, 1, 1).await;
    let r = router_over(
        &fleet,
        &[
            "--retry-max-retries",
            "3",
            "--cb-failure-threshold",
            "100",
            "--health-failure-threshold",
            "100",
            "--mode",
            "round-robin",
        ],
    )
    .await;
    fleet.prefill[0].set_fail(Fail::Status(503));
    fleet.prefill[1].set_fail(Fail::Status(503));
    // Both prefills refuse: every attempt fails, each with a new room.
    let (status, _, _) = post_bytes(&r.url, "/generate", r#"{"input_ids": [1]}"#).await;
    assert_eq!(status, 502);
    let rooms: Vec<u64> = fleet
        .prefill
        .iter()
        .flat_map(|f| f.bodies())
        .map(|(_, b)| {
            serde_json::from_slice::<Value>(&b).unwrap()["bootstrap_room"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(rooms.len(), 3, "3 attempts");
    assert!(
        fleet.prefill.iter().all(|f| f.served() >= 1),
        "a new prefill worker on retry"
    );
    let mut distinct = rooms.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "a new room per attempt");
    fleet.prefill[1].set_fail(Fail::None);
    assert_eq!(
        post_bytes(&r.url, "/generate", r#"{"input_ids": [1]}"#)
            .await
            .0,
        200
    );
}

/// Open: about one run in six, the second sibling goes to the other prefill worker and the
/// rest follow it (no leg fails, nothing is retried; each request takes ~3 ms, but those runs
/// take ~0.5 s in all against ~0.1 s, so something around the router's start differs), as if
/// the first request's prediction were not seen. To be investigated before it gates anything
/// (`cargo test -p kvrouter --test pd fleet:: -- --ignored`).
#[ignore = "flaky: see the comment above"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpo_siblings_share_one_prefill_worker() {
    let fleet = PdFleet::start(2, 2, 1, 1).await;
    let r = router_over(&fleet, &[]).await;
    // A GRPO group: 8 requests of one 1024-token prompt (64 blocks), one after the other.
    let ids: Vec<String> = (0..1024)
        .map(|i| (1000 + i * 7 % 5000).to_string())
        .collect();
    let body = format!(
        r#"{{"input_ids": [{}], "sampling_params": {{"max_new_tokens": 2}}}}"#,
        ids.join(",")
    );
    support::kv::wait_units(&support::http::client(), &r.url, 4).await;
    let mut order = Vec::new();
    for _ in 0..8 {
        assert_eq!(post_bytes(&r.url, "/generate", &body).await.0, 200);
        order.push(fleet.prefill.iter().map(PdFake::served).collect::<Vec<_>>());
        // The prefill leg is drained beside the decode response: wait until it is released.
        wait_for("the legs to be released", || async {
            let w = support::admin::workers(&r.url).await;
            w["workers"]
                .as_array()
                .unwrap()
                .iter()
                .all(|w| w["in_flight"] == 0)
        })
        .await;
    }
    let prefill: Vec<usize> = fleet.prefill.iter().map(PdFake::served).collect();
    assert!(
        prefill.contains(&8),
        "all siblings on one prefill worker: {prefill:?}"
    );
    let decode: Vec<usize> = fleet.decode.iter().map(PdFake::served).collect();
    assert_eq!(decode.iter().sum::<usize>(), 8);
    assert!(
        decode.iter().all(|n| *n > 0),
        "decode balanced by load: {decode:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dp_ranks_go_to_both_legs() {
    let fleet = PdFleet::start(1, 1, 2, 2).await;
    let r = router_over(&fleet, &[]).await;
    let body = r#"{"input_ids": [1, 2, 3]}"#;
    assert_eq!(post_bytes(&r.url, "/generate", body).await.0, 200);
    let ((_, p), (_, d)) = last_pair(&fleet);
    let (p, d) = (injected(body, &p), injected(body, &d));
    let rank = p["routed_dp_rank"].as_u64().unwrap();
    assert!(rank < 2);
    assert_eq!(d["disagg_prefill_dp_rank"], rank);
    // The room names the rank too (room % dp_size): SGLang 0.5.9 drops both rank fields
    // (unknown keys), places its PD prefill by room % dp_size and its decode looks there.
    assert_eq!(p["bootstrap_room"].as_u64().unwrap() % 2, rank, "{p}");
    assert_eq!(p["bootstrap_room"], d["bootstrap_room"]);
    // Decode by load picks a worker, not a rank: its own DP scheduler places the request.
    assert!(d.get("routed_dp_rank").is_none(), "{d}");
    assert!(p.get("disagg_prefill_dp_rank").is_none());
    // A batch: every room on the chosen rank.
    let body = r#"{"input_ids": [[1, 2, 3], [4, 5, 6], [7, 8, 9]]}"#;
    assert_eq!(post_bytes(&r.url, "/generate", body).await.0, 200);
    let ((_, p), (_, d)) = last_pair(&fleet);
    let (p, d) = (injected(body, &p), injected(body, &d));
    let rank = p["routed_dp_rank"].as_u64().unwrap();
    let rooms: Vec<u64> = p["bootstrap_room"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_u64().unwrap())
        .collect();
    assert_eq!(rooms.len(), 3);
    assert!(rooms.iter().all(|r| r % 2 == rank), "{rooms:?} rank {rank}");
    assert_eq!(p["bootstrap_room"], d["bootstrap_room"]);
    // The client's own rank wins: nothing injected but the bootstrap fields.
    let body = r#"{"input_ids": [1, 2, 3], "routed_dp_rank": 1}"#;
    assert_eq!(post_bytes(&r.url, "/generate", body).await.0, 200);
    let ((_, p), (_, d)) = last_pair(&fleet);
    assert!(injected(body, &p).get("routed_dp_rank").is_none());
    assert!(injected(body, &d).get("disagg_prefill_dp_rank").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_needs_a_prefill_and_a_decode_worker_and_admin_routes_reach_both() {
    let fleet = PdFleet::start(1, 1, 1, 1).await;
    let prefill = fleet.prefill[0].url.clone();
    let r = start_router(&["--pd-disaggregation", "--prefill", &prefill, "none"]);
    support::admin::wait_healthy_count(&r.url, 1).await;
    let (status, v) = support::http::get(&r.url, "/readiness").await;
    assert_eq!(status, 503, "{v}");
    assert!(
        v["reason"].as_str().unwrap().contains("no decode worker"),
        "{v}"
    );
    let (status, v) = support::http::post(
        &r.url,
        "/workers",
        json!({"url": fleet.decode[0].url, "worker_type": "decoder"}),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    let (status, v) = support::http::post(
        &r.url,
        "/workers",
        json!({"url": fleet.decode[0].url, "worker_type": "decode"}),
    )
    .await;
    assert_eq!(status, 202, "{v}");
    wait_ready(&r.url, "the PD router to be ready").await;
    let workers = support::admin::workers(&r.url).await;
    let types: Vec<&str> = workers["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["worker_type"].as_str().unwrap())
        .collect();
    assert_eq!(types.len(), 2);
    assert!(
        types.contains(&"prefill") && types.contains(&"decode"),
        "{types:?}"
    );
    let body = r#"{"input_ids": [1, 2, 3]}"#;
    assert_eq!(post_bytes(&r.url, "/generate", body).await.0, 200);
    let ((_, p), _) = last_pair(&fleet);
    assert_eq!(
        injected(body, &p)["bootstrap_port"],
        Value::Null,
        "--prefill URL none"
    );
    let (status, v) = support::http::get(&r.url, "/model_info").await;
    assert_eq!((status, v["role"].as_str()), (200, Some("prefill")), "{v}");
    let (status, _) = support::http::post(&r.url, "/flush_cache", json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(fleet.prefill[0].hits("/flush_cache"), 1);
    assert_eq!(fleet.decode[0].hits("/flush_cache"), 1);
}
