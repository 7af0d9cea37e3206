//! PD roles of in-process `sglang-mock`s over loopback (docs/mock.md "PD disaggregation"):
//! SGLang's 400 without a room, the fake transfer, a prefill and a decode paired by room (the
//! decode continues from the prefill's first token), the bootstrap and waiting failures, a
//! duplicate receiver, the decode radix cache's delta transfer, and the server info / load
//! fields of each role.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: an unwrap is an assertion

use serde_json::{json, Value};

use crate::support::inproc::{http, mock, post, send};

async fn get(addr: &str, path: &str) -> Value {
    let (st, b) = http(addr, "GET", path, None).await;
    assert_eq!(st, 200, "{path}: {b}");
    serde_json::from_str(&b).unwrap()
}

/// A prefill mock and its bootstrap port (from `/server_info`).
async fn prefill(extra: &[&str]) -> (String, u16) {
    let mut args = vec![
        "--disaggregation-mode",
        "prefill",
        "--disaggregation-bootstrap-port",
        "0",
    ];
    args.extend_from_slice(extra);
    let p = mock(&args).await;
    let info = get(&p, "/server_info").await;
    assert_eq!(info["disaggregation_mode"], "prefill");
    let port = info["disaggregation_bootstrap_port"].as_u64().unwrap() as u16;
    assert_ne!(port, 0);
    (p, port)
}

fn gen(ids: &[u32], max_new: u32, boot: Value) -> Value {
    let mut b = json!({"input_ids": ids, "sampling_params": {"max_new_tokens": max_new},
                       "return_logprob": true});
    if let (Some(o), Some(e)) = (b.as_object_mut(), boot.as_object()) {
        o.extend(e.clone());
    }
    b
}

fn prompt(n: u32) -> Vec<u32> {
    (0..n).map(|i| 300 + i * 7).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_roles_need_a_room_and_serve_the_fake_host() {
    let (p, _) = prefill(&[]).await;
    let d = mock(&["--disaggregation-mode", "decode"]).await;
    for addr in [&p, &d] {
        let (st, v) = post(addr, "/generate", gen(&[301, 302], 2, json!({"rid": "r1"}))).await;
        assert_eq!(st, 400, "{v}");
        assert_eq!(
            v["error"]["message"],
            "Invalid request: Disaggregated request received without bootstrap room id. req.rid='r1'"
        );
        let (st, v) = post(
            addr,
            "/v1/completions",
            json!({"prompt": "a b", "bootstrap_room": null}),
        )
        .await;
        assert_eq!(st, 400, "{v}");
        assert_eq!(v["object"], "error");
    }
    // The fake host completes locally: the prefill with one token and length 0.
    let fake = json!({"bootstrap_host": "2.2.2.2", "bootstrap_port": null, "bootstrap_room": 1});
    let (st, v) = post(&p, "/generate", gen(&prompt(9), 8, fake.clone())).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["meta_info"]["finish_reason"],
        json!({"type": "length", "length": 0})
    );
    assert_eq!(v["output_ids"].as_array().unwrap().len(), 1);
    let input = v["meta_info"]["input_token_logprobs"].as_array().unwrap();
    assert_eq!(input.len(), 9);
    assert_eq!(input[0], json!([null, 300, null]));
    // The decode decodes max_new_tokens.
    let (st, v) = post(&d, "/generate", gen(&prompt(9), 8, fake)).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["output_ids"].as_array().unwrap().len(), 8);
    assert_eq!(
        v["meta_info"]["finish_reason"],
        json!({"type": "length", "length": 8})
    );
    // Server info and loads name the roles.
    let info = get(&d, "/server_info").await;
    assert_eq!(info["disaggregation_mode"], "decode");
    assert_eq!(info["disaggregation_bootstrap_port"], 8998);
    assert_eq!(info["disable_radix_cache"], true);
    let loads = get(&p, "/v1/loads").await;
    assert_eq!(loads["loads"][0]["disaggregation"]["mode"], "prefill");
    assert_eq!(
        get(&p, "/server_info").await["load_balance_method"],
        "follow_bootstrap_room"
    );
    let null = mock(&[]).await;
    assert_eq!(
        get(&null, "/server_info").await["disaggregation_mode"],
        "null"
    );
    let (st, _) = post(&null, "/generate", gen(&[301], 1, json!({}))).await;
    assert_eq!(st, 200, "the null role needs no room");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pair_meets_by_room_and_the_decode_continues_the_prefill() {
    let (p, port) = prefill(&["--seed", "1"]).await;
    // A different seed on the decode: its first token can only come from the prefill.
    let d = mock(&["--disaggregation-mode", "decode", "--seed", "2"]).await;
    let boot = json!({"bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": 77});
    let ids = prompt(20);
    let (pb, db) = (gen(&ids, 6, boot.clone()), gen(&ids, 6, boot));
    // The decode registers first, the prefill comes later: either order pairs.
    let dec = tokio::spawn({
        let d = d.clone();
        async move { post(&d, "/generate", db).await }
    });
    let (ps, pv) = post(&p, "/generate", pb).await;
    let (ds, dv) = dec.await.unwrap();
    assert_eq!(ps, 200, "{pv}");
    assert_eq!(ds, 200, "{dv}");
    assert_eq!(pv["meta_info"]["finish_reason"]["length"], 0);
    assert_eq!(dv["output_ids"].as_array().unwrap().len(), 6);
    assert_eq!(
        dv["output_ids"][0], pv["output_ids"][0],
        "the prefill's first token"
    );
    assert_eq!(dv["meta_info"]["cached_tokens"], 0, "a cold prefill");
    // Again: the prefill hits its cache, and the decode reports the prefill's hit (SGLang
    // sends it in the metadata buffer), though it has no radix cache of its own.
    let boot = json!({"bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": 78});
    let dec = tokio::spawn({
        let (d, b) = (d.clone(), gen(&ids, 6, boot.clone()));
        async move { post(&d, "/generate", b).await }
    });
    let (_, pv) = post(&p, "/generate", gen(&ids, 6, boot)).await;
    let (_, dv) = dec.await.unwrap();
    assert_eq!(pv["meta_info"]["cached_tokens"], 16, "{pv}");
    assert_eq!(dv["meta_info"]["cached_tokens"], 16, "{dv}");
    // A batch with one room each, OpenAI route, and a scalar room expanded to room + i.
    let boot =
        json!({"bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": 500});
    let body = |b: &Value| {
        let mut v = json!({"prompt": ["a b c", "d e f"], "max_tokens": 3});
        v.as_object_mut()
            .unwrap()
            .extend(b.as_object().unwrap().clone());
        v
    };
    let dec = tokio::spawn({
        let (d, b) = (d.clone(), body(&boot));
        async move { post(&d, "/v1/completions", b).await }
    });
    let (ps, pv) = post(&p, "/v1/completions", body(&boot)).await;
    let (ds, dv) = dec.await.unwrap();
    assert_eq!(ps, 200, "{pv}");
    assert_eq!(ds, 200, "{dv}");
    assert_eq!(dv["usage"]["completion_tokens"], 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_500s_with_sglangs_messages() {
    // No decode ever comes: the prefill gives up after its bootstrap timeout.
    let (p, port) = prefill(&["--disaggregation-bootstrap-timeout", "0.2"]).await;
    let boot = json!({"bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": 9});
    let (st, v) = post(&p, "/generate", gen(&prompt(8), 2, boot.clone())).await;
    assert_eq!(st, 500, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Prefill bootstrap failed for request rank=0"),
        "{msg}"
    );
    assert!(msg.ends_with("in KVPoll.Bootstrapping"), "{msg}");
    assert_eq!(
        get(&p, "/v1/loads").await["loads"][0]["disaggregation"]["prefill_bootstrap_queue_reqs"],
        0
    );
    // No prefill ever comes: the decode gives up after its waiting timeout.
    let d = mock(&[
        "--disaggregation-mode",
        "decode",
        "--disaggregation-waiting-timeout",
        "0.2",
    ])
    .await;
    let (st, v) = post(&d, "/generate", gen(&prompt(8), 2, boot)).await;
    assert_eq!(st, 500, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Decode transfer failed for request rank=0"),
        "{msg}"
    );
    assert!(msg.ends_with("in KVPoll.WaitingForInput"), "{msg}");
    // No bootstrap server there at all: at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = closed.local_addr().unwrap().port();
    drop(closed);
    let d2 = mock(&["--disaggregation-mode", "decode"]).await;
    let boot = json!({"bootstrap_host": "127.0.0.1", "bootstrap_port": dead, "bootstrap_room": 10});
    let (st, v) = post(
        &d2,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "x"}],
        "bootstrap_host": "127.0.0.1", "bootstrap_port": dead, "bootstrap_room": 10}),
    )
    .await;
    assert_eq!(st, 500, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("cannot reach the prefill bootstrap server"),
        "{v}"
    );
    // Streaming: the head is already sent, the failure is an SSE error event.
    let mut body = gen(&prompt(8), 2, boot);
    body["stream"] = json!(true);
    let (st, text) = http(&d2, "POST", "/generate", Some(&body)).await;
    assert_eq!(st, 200);
    assert!(
        text.contains("\"error\"") && text.contains("Decode transfer failed"),
        "{text}"
    );
    assert!(text.contains("data: [DONE]"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_receiver_for_a_room_is_rejected() {
    // A slow prefill (seconds of wall time) keeps the room paired while both decodes arrive.
    let (p, port) = prefill(&["--speedup", "0.005"]).await;
    let d = mock(&[
        "--disaggregation-mode",
        "decode",
        "--disaggregation-waiting-timeout",
        "60",
    ])
    .await;
    let boot = json!({"bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": 42});
    let call = |addr: &String| {
        let (a, b) = (addr.clone(), gen(&prompt(8), 2, boot.clone()));
        tokio::spawn(async move { post(&a, "/generate", b).await })
    };
    let pre = call(&p);
    let (one, two) = (call(&d), call(&d));
    let (one, two) = (one.await.unwrap(), two.await.unwrap());
    assert_eq!(pre.await.unwrap().0, 200);
    let (ok, dup) = if one.0 == 200 { (one, two) } else { (two, one) };
    assert_eq!(ok.0, 200, "{}", ok.1);
    assert_eq!(dup.0, 500, "{}", dup.1);
    let msg = dup.1["error"]["message"].as_str().unwrap();
    assert!(msg.contains("Duplicate decode bootstrap room"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_decode_radix_cache_receives_only_the_delta() {
    let (p, port) = prefill(&[]).await;
    let d = mock(&[
        "--disaggregation-mode",
        "decode",
        "--disaggregation-decode-enable-radix-cache",
    ])
    .await;
    assert_eq!(get(&d, "/server_info").await["disable_radix_cache"], false);
    let ids = prompt(64);
    let mut latency = Vec::new();
    for room in [1u64, 2] {
        let boot =
            json!({"bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": room});
        let dec = tokio::spawn({
            let (d, b) = (d.clone(), gen(&ids, 3, boot.clone()));
            async move { post(&d, "/generate", b).await }
        });
        let (ps, pv) = post(&p, "/generate", gen(&ids, 3, boot)).await;
        let (ds, dv) = dec.await.unwrap();
        assert_eq!((ps, ds), (200, 200), "{pv} {dv}");
        if room == 2 {
            assert_eq!(
                dv["meta_info"]["cached_tokens"], 60,
                "the decode's own prefix: {dv}"
            );
        }
        let l = get(&p, "/v1/loads").await;
        latency.push(
            l["loads"][0]["disaggregation"]["kv_transfer_latency_ms"]
                .as_f64()
                .unwrap(),
        );
    }
    // 64 tokens, then one page (4 tokens) beyond the decode's 60.
    assert!((latency[0] / latency[1] - 16.0).abs() < 1e-6, "{latency:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dp_ranks_follow_the_room_or_the_pinned_rank() {
    let (p, port) = prefill(&["--dp-size", "2"]).await;
    let fake = |room: u64, extra: Value| {
        let mut b = json!({"bootstrap_host": "2.2.2.2", "bootstrap_room": room});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        gen(&prompt(8), 1, b)
    };
    for (room, pin, rank) in [
        (5u64, json!({}), 1),
        (6, json!({}), 0),
        (5, json!({"routed_dp_rank": 0}), 0),
    ] {
        let (st, v) = post(&p, "/generate", fake(room, pin)).await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["meta_info"]["dp_rank"], rank, "room {room}: {v}");
    }
    // A decode naming the wrong prefill rank fails the pair at once (room 7 is on rank 1).
    let d = mock(&["--disaggregation-mode", "decode"]).await;
    let boot = json!({"bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": 7,
                      "disagg_prefill_dp_rank": 0});
    let dec = tokio::spawn({
        let (d, b) = (d.clone(), gen(&prompt(8), 2, boot.clone()));
        async move { post(&d, "/generate", b).await }
    });
    let (ps, pv) = post(&p, "/generate", gen(&prompt(8), 2, boot)).await;
    let (ds, dv) = dec.await.unwrap();
    assert_eq!((ps, ds), (500, 500), "{pv} {dv}");
    assert!(
        dv["error"]["message"]
            .as_str()
            .unwrap()
            .contains("prefill DP rank 0"),
        "{dv}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefill_client_going_away_frees_its_room() {
    let (p, port) = prefill(&[]).await;
    let boot = json!({"bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": 11});
    let body = gen(&prompt(8), 2, boot.clone());
    // A client that sends its request and leaves while the prefill waits for its decode.
    let s = send(&p, "POST", "/generate", Some(&body)).await;
    let waiting = |n: u64| {
        let p = p.clone();
        async move {
            loop {
                let l = get(&p, "/v1/loads").await;
                if l["loads"][0]["disaggregation"]["prefill_bootstrap_queue_reqs"] == n {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    };
    waiting(1).await;
    // Its KV is held for the transfer (SGLang's inflight queue): the cache cannot be flushed.
    loop {
        let r = &get(&p, "/mock/state").await["ranks"][0];
        if r["running"] == 0 && r["waiting"] == 0 && r["used_tokens"].as_u64() > Some(0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(http(&p, "POST", "/flush_cache", None).await.0, 400);
    drop(s);
    waiting(0).await;
    // Released with the request.
    let mut flushed = false;
    for _ in 0..500 {
        if http(&p, "POST", "/flush_cache", None).await.0 == 200 {
            flushed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(flushed, "the held KV is released when the client goes away");
    // The room is free again: a new request for it pairs with a decode.
    let d = mock(&["--disaggregation-mode", "decode"]).await;
    let dec = tokio::spawn({
        let (d, b) = (d.clone(), gen(&prompt(8), 2, boot.clone()));
        async move { post(&d, "/generate", b).await }
    });
    let (ps, pv) = post(&p, "/generate", gen(&prompt(8), 2, boot)).await;
    assert_eq!(ps, 200, "{pv}");
    assert_eq!(dec.await.unwrap().0, 200);
}

/// Polls `cond` on `addr`'s `path` (bounded: 10 s).
async fn until(addr: &str, path: &str, what: &str, cond: impl Fn(&Value) -> bool) {
    for _ in 0..1000 {
        if cond(&get(addr, path).await) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decode_client_going_away_withdraws_its_registration() {
    let (p, port) = prefill(&[]).await;
    let d = mock(&["--disaggregation-mode", "decode"]).await;
    let boot = json!({"bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": 21});
    let body = gen(&prompt(8), 2, boot.clone());
    let s = send(&d, "POST", "/generate", Some(&body)).await;
    until(&p, "/mock/state", "the decode's registration", |v| {
        v["pd_rooms"] == 1
    })
    .await;
    drop(s);
    until(&p, "/mock/state", "the registration withdrawn", |v| {
        v["pd_rooms"] == 0
    })
    .await;
    until(&d, "/v1/loads", "the decode's queue empty", |v| {
        v["loads"][0]["disaggregation"]["decode_prealloc_queue_reqs"] == 0
    })
    .await;
    // The room is free: a new pair for it is served.
    let dec = tokio::spawn({
        let (d, b) = (d.clone(), gen(&prompt(8), 2, boot.clone()));
        async move { post(&d, "/generate", b).await }
    });
    let (ps, pv) = post(&p, "/generate", gen(&prompt(8), 2, boot)).await;
    assert_eq!(ps, 200, "{pv}");
    assert_eq!(dec.await.unwrap().0, 200);
}
