//! PD disaggregation over real `sglang-mock` PD roles (docs/pd.md, docs/mock.md "PD
//! disaggregation"): a router started with `--pd-disaggregation --prefill URL PORT --decode
//! URL` over a 2P2D fleet of `sglang-mock --disaggregation-mode prefill|decode` processes
//! (each prefill with its bootstrap listener on an ephemeral port, read back from
//! `/server_info.disaggregation_bootstrap_port`). Covers `/generate`, chat and completions
//! (plain, streamed, batched), a DP fleet, GRPO siblings sharing one prefill worker through the
//! prefill mocks' KV events, a prefill killed mid-request, and decode radix caches (the decode
//! leg on the decodes' own index, only the delta transferred).
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion
#![allow(clippy::disallowed_methods)] // fixtures spawn their own tasks; `Tasks` is the router's

use crate::support;

use serde_json::{json, Value};
use support::admin::wait_ready;
use support::kv::{debug_index, wait_index, ADMIN};
use support::procs::{mock, start_router};
use support::wait::wait_for;
use support::Proc;

const EVENTS: &str = r#"{"publisher":"zmq","endpoint":"tcp://*:0","replay_endpoint":"tcp://*:0"}"#;

/// A 2P2D (or other) fleet of PD mocks.
struct Fleet {
    prefill: Vec<(Proc, u16)>,
    decode: Vec<Proc>,
}

async fn bootstrap_port(url: &str) -> u16 {
    let (status, info) = support::http::get(url, "/server_info").await;
    assert_eq!(status, 200);
    assert_eq!(info["disaggregation_mode"], "prefill");
    info["disaggregation_bootstrap_port"].as_u64().unwrap() as u16
}

impl Fleet {
    async fn start(p: usize, d: usize, extra_p: &[&str], extra_d: &[&str]) -> Fleet {
        let mut prefill = Vec::new();
        for _ in 0..p {
            let mut args = vec![
                "--disaggregation-mode",
                "prefill",
                "--disaggregation-bootstrap-port",
                "0",
                "--page-size",
                "4",
                "--kv-events-config",
                EVENTS,
            ];
            args.extend_from_slice(extra_p);
            let m = mock(&args);
            let port = bootstrap_port(&m.url).await;
            prefill.push((m, port));
        }
        let decode = (0..d)
            .map(|_| {
                let mut args = vec!["--disaggregation-mode", "decode", "--page-size", "4"];
                args.extend_from_slice(extra_d);
                mock(&args)
            })
            .collect();
        Fleet { prefill, decode }
    }

    fn router_args(&self) -> Vec<String> {
        let mut args: Vec<String> = [
            "--pd-disaggregation",
            "--mode",
            "kv",
            "--page-size",
            "4",
            "--admin-api-key",
            ADMIN,
        ]
        .map(String::from)
        .to_vec();
        for (p, port) in &self.prefill {
            args.extend(["--prefill".into(), p.url.clone(), port.to_string()]);
        }
        for d in &self.decode {
            args.extend(["--decode".into(), d.url.clone()]);
        }
        args
    }

    async fn router(&self) -> Proc {
        let args = self.router_args();
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = start_router(&refs);
        wait_ready(&r.url, "the PD router to be ready").await;
        r
    }
}

async fn post_raw(url: &str, path: &str, body: &str) -> (u16, Vec<u8>) {
    let (status, _, bytes) = support::http::post_bytes(url, path, body).await;
    (status, bytes)
}

/// The JSON events of an SSE body (without `[DONE]`; see `support::http::sse_events`).
fn sse_events(body: &[u8]) -> Vec<Value> {
    support::http::sse_events(&String::from_utf8_lossy(body))
}

fn ids(n: usize, seed: usize) -> Vec<usize> {
    (0..n)
        .map(|i| 300 + (seed * 131 + i * 17) % 20000)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2p2d_mock_fleet_serves_every_route_plain_streamed_and_batched() {
    let fleet = Fleet::start(2, 2, &["--speedup", "0"], &["--speedup", "0"]).await;
    let r = fleet.router().await;
    let prompt = json!(ids(33, 1)).to_string();

    // /generate, plain: the decode's answer with max_new_tokens outputs; the logprob merge
    // puts the prefill's prompt logprobs first.
    let body = format!(
        r#"{{"input_ids": {prompt}, "sampling_params": {{"max_new_tokens": 5}}, "return_logprob": true}}"#
    );
    let (s, got) = post_raw(&r.url, "/generate", &body).await;
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&got));
    let v: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(v["output_ids"].as_array().unwrap().len(), 5);
    assert_eq!(
        v["meta_info"]["finish_reason"],
        json!({"type": "length", "length": 5})
    );
    assert_eq!(v["meta_info"]["prompt_tokens"], 33);
    assert_eq!(
        v["meta_info"]["input_token_logprobs"]
            .as_array()
            .unwrap()
            .len(),
        33,
        "the prefill's input logprobs, merged: {v}"
    );
    assert_eq!(
        v["meta_info"]["output_token_logprobs"]
            .as_array()
            .unwrap()
            .len(),
        5
    );

    // /generate, streamed: cumulative events, the last one finished.
    let body = format!(
        r#"{{"input_ids": {prompt}, "sampling_params": {{"max_new_tokens": 4}}, "stream": true}}"#
    );
    let (s, got) = post_raw(&r.url, "/generate", &body).await;
    assert_eq!(s, 200);
    let ev = sse_events(&got);
    let last = ev.last().unwrap();
    assert_eq!(last["output_ids"].as_array().unwrap().len(), 4, "{ev:?}");
    assert_eq!(last["meta_info"]["finish_reason"]["type"], "length");

    // /generate, batched (one room per prompt), token ids and text.
    let body = r#"{"input_ids": [[301,302,303,304,305],[401,402,403,404,405,406]], "sampling_params": {"max_new_tokens": 3}}"#;
    let (s, got) = post_raw(&r.url, "/generate", body).await;
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&got));
    let v: Value = serde_json::from_slice(&got).unwrap();
    let items = v.as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert!(items
        .iter()
        .all(|i| i["output_ids"].as_array().unwrap().len() == 3));
    let (s, got) = post_raw(
        &r.url,
        "/generate",
        r#"{"text": ["a b c", "d e f", "g h"]}"#,
    )
    .await;
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&got));
    assert_eq!(
        serde_json::from_slice::<Value>(&got)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // Chat: plain, streamed, n = 2 (one room per choice).
    let chat = r#"{"model": "mock-model", "messages": [{"role": "user", "content": "hi there"}], "max_tokens": 3}"#;
    let (s, got) = post_raw(&r.url, "/v1/chat/completions", chat).await;
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&got));
    let v: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(v["usage"]["completion_tokens"], 3);
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    let chat_stream = r#"{"model": "mock-model", "messages": [{"role": "user", "content": "hi there"}], "max_tokens": 3, "stream": true}"#;
    let (s, got) = post_raw(&r.url, "/v1/chat/completions", chat_stream).await;
    assert_eq!(s, 200);
    let ev = sse_events(&got);
    assert!(
        ev.iter()
            .any(|e| e["choices"][0]["finish_reason"] == "length"),
        "{ev:?}"
    );
    let chat_n = r#"{"model": "mock-model", "messages": [{"role": "user", "content": "hi there"}], "max_tokens": 2, "n": 2}"#;
    let (s, got) = post_raw(&r.url, "/v1/chat/completions", chat_n).await;
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&got));
    let v: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(v["choices"].as_array().unwrap().len(), 2);

    // Completions: plain, streamed, an array prompt.
    let (s, got) = post_raw(
        &r.url,
        "/v1/completions",
        r#"{"model": "mock-model", "prompt": "hello world", "max_tokens": 2}"#,
    )
    .await;
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&got));
    assert_eq!(
        serde_json::from_slice::<Value>(&got).unwrap()["usage"]["completion_tokens"],
        2
    );
    let (s, got) = post_raw(
        &r.url,
        "/v1/completions",
        r#"{"model": "mock-model", "prompt": "hello world", "max_tokens": 2, "stream": true}"#,
    )
    .await;
    assert_eq!(s, 200);
    assert!(sse_events(&got)
        .iter()
        .any(|e| e["choices"][0]["finish_reason"] == "length"));
    let (s, got) = post_raw(
        &r.url,
        "/v1/completions",
        r#"{"model": "mock-model", "prompt": ["a b", "c d"], "max_tokens": 2}"#,
    )
    .await;
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&got));
    assert_eq!(
        serde_json::from_slice::<Value>(&got).unwrap()["choices"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // Every room was served: nothing waits on any prefill or decode.
    for url in fleet
        .prefill
        .iter()
        .map(|(p, _)| &p.url)
        .chain(fleet.decode.iter().map(|d| &d.url))
    {
        let (_, loads) = support::http::get(url, "/v1/loads").await;
        let d = &loads["loads"][0]["disaggregation"];
        assert_eq!(d["prefill_bootstrap_queue_reqs"], 0, "{url}: {d}");
        assert_eq!(d["decode_prealloc_queue_reqs"], 0, "{url}: {d}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dp_fleet_pins_both_legs() {
    let dp = ["--speedup", "0", "--dp-size", "2"];
    let fleet = Fleet::start(2, 2, &dp, &dp).await;
    let r = fleet.router().await;
    for seed in 0..6 {
        let prompt = json!(ids(20, 100 + seed)).to_string();
        let body =
            format!(r#"{{"input_ids": {prompt}, "sampling_params": {{"max_new_tokens": 3}}}}"#);
        let (s, got) = post_raw(&r.url, "/generate", &body).await;
        assert_eq!(s, 200, "{}", String::from_utf8_lossy(&got));
        let v: Value = serde_json::from_slice(&got).unwrap();
        assert!(
            v["meta_info"]["dp_rank"].as_u64().is_some_and(|r| r < 2),
            "{v}"
        );
        assert_eq!(v["output_ids"].as_array().unwrap().len(), 3);
    }
    let (s, got) = post_raw(&r.url, "/v1/chat/completions", r#"{"model": "mock-model", "messages": [{"role": "user", "content": "dp"}], "max_tokens": 2, "stream": true}"#).await;
    assert_eq!(s, 200);
    assert!(sse_events(&got)
        .iter()
        .any(|e| e["choices"][0]["finish_reason"] == "length"));
}

/// `sglang:num_requests_total` of a mock.
async fn served(url: &str) -> f64 {
    let text = support::http::get_text(&support::http::client(), &format!("{url}/metrics")).await;
    text.lines()
        .filter(|l| l.starts_with("sglang:num_requests_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpo_siblings_share_one_prefill_worker_through_its_kv_events() {
    let fleet = Fleet::start(2, 2, &["--speedup", "0"], &["--speedup", "0"]).await;
    let r = fleet.router().await;
    let c = support::http::client();
    // The router subscribes to both prefill mocks' events (the decode mocks publish none).
    support::kv::wait_sources(&c, &r.url, 2).await;
    // Make each subscription live (ZMQ slow joiner): a fake-transfer request straight to
    // the prefill (SGLang's warm-up form) until the router's index shows its blocks.
    for (i, (p, _)) in fleet.prefill.iter().enumerate() {
        let mut room = 1_000 * (i as u64 + 1);
        wait_for("the router to see the prefill's KV events", || {
            room += 1;
            let body = json!({"input_ids": ids(8, room as usize), "sampling_params": {"max_new_tokens": 1},
                "bootstrap_host": "2.2.2.2", "bootstrap_room": room});
            let (c, url, router) = (c.clone(), p.url.clone(), r.url.clone());
            async move {
                let (s, _) = support::http::post(&url, "/generate", body).await;
                assert_eq!(s, 200, "fake transfer straight to the prefill");
                support::kv::blocks_of(&debug_index(&c, &router).await, &url) > 0
            }
        })
        .await;
    }
    let before: Vec<f64> = futures_served(&fleet).await;
    // A GRPO group of 8 on one 256-token prompt: the first one, then (once its blocks are
    // in the index) the other 7 at once.
    let body =
        json!({"input_ids": ids(256, 7), "sampling_params": {"max_new_tokens": 4}}).to_string();
    assert_eq!(post_raw(&r.url, "/generate", &body).await.0, 200);
    let holder = {
        let v = wait_index(&c, &r.url, "the first sibling's blocks", |v| {
            fleet
                .prefill
                .iter()
                .any(|(p, _)| support::kv::blocks_of(v, &p.url) >= 64)
        })
        .await;
        fleet
            .prefill
            .iter()
            .position(|(p, _)| support::kv::blocks_of(&v, &p.url) >= 64)
            .unwrap()
    };
    let rest: Vec<_> = (0..7)
        .map(|_| {
            let (u, b) = (r.url.clone(), body.clone());
            tokio::spawn(async move { post_raw(&u, "/generate", &b).await.0 })
        })
        .collect();
    for h in rest {
        assert_eq!(h.await.unwrap(), 200);
    }
    let after = futures_served(&fleet).await;
    let per: Vec<f64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(
        per[holder], 8.0,
        "all siblings on the prefill holding the prefix: {per:?}"
    );
    assert_eq!(per.iter().sum::<f64>(), 8.0, "{per:?}");
}

async fn futures_served(fleet: &Fleet) -> Vec<f64> {
    let mut out = Vec::new();
    for (p, _) in &fleet.prefill {
        out.push(served(&p.url).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefill_killed_mid_request_is_a_5xx_and_frees_the_decode() {
    // A slow prefill (a prefill step takes seconds of wall time) and SGLang's 300 s
    // timeouts everywhere: the decode must learn the prefill died, not wait them out.
    let mut fleet = Fleet::start(1, 1, &["--speedup", "0.0005"], &["--speedup", "0"]).await;
    let r = fleet.router().await;
    let url = r.url.clone();
    let body =
        json!({"input_ids": ids(64, 3), "sampling_params": {"max_new_tokens": 4}}).to_string();
    let call = tokio::spawn(async move { post_raw(&url, "/generate", &body).await });
    let (purl, durl) = (fleet.prefill[0].0.url.clone(), fleet.decode[0].url.clone());
    wait_for("both legs in flight", || {
        let (p, d) = (purl.clone(), durl.clone());
        async move {
            let (_, pl) = support::http::get(&p, "/v1/loads").await;
            let (_, dl) = support::http::get(&d, "/v1/loads").await;
            pl["loads"][0]["disaggregation"]["prefill_bootstrap_queue_reqs"] == 1
                && dl["loads"][0]["disaggregation"]["decode_prealloc_queue_reqs"] == 1
        }
    })
    .await;
    fleet.prefill[0].0.kill();
    let (s, got) = call.await.unwrap();
    assert!(s >= 500, "a 5xx: {s} {}", String::from_utf8_lossy(&got));
    wait_for("the decode to drop the dead prefill's room", || {
        let d = durl.clone();
        async move {
            let (_, dl) = support::http::get(&d, "/v1/loads").await;
            dl["loads"][0]["disaggregation"]["decode_prealloc_queue_reqs"] == 0
        }
    })
    .await;
    // The decode still serves (a fake-transfer request completes locally).
    let (s, v) = support::http::post(
        &durl,
        "/generate",
        json!({"input_ids": [301, 302, 303], "sampling_params": {"max_new_tokens": 2},
               "bootstrap_host": "2.2.2.2", "bootstrap_room": 5}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["output_ids"].as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_decode_radix_caches_siblings_share_a_decode_that_receives_only_the_delta() {
    let decode_args = [
        "--speedup",
        "0",
        "--disaggregation-decode-enable-radix-cache",
        "--kv-events-config",
        EVENTS,
    ];
    let fleet = Fleet::start(2, 2, &["--speedup", "0"], &decode_args).await;
    let r = fleet.router().await;
    let c = support::http::client();
    // Every worker publishes: the router follows all four (the decodes' own caches too).
    support::kv::wait_sources(&c, &r.url, 4).await;
    let urls: Vec<String> = fleet
        .prefill
        .iter()
        .map(|(p, _)| p.url.clone())
        .chain(fleet.decode.iter().map(|d| d.url.clone()))
        .collect();
    for (i, url) in urls.iter().enumerate() {
        let mut room = 10_000 * (i as u64 + 1);
        wait_for("the router to see the worker's KV events", || {
            room += 1;
            let body = json!({"input_ids": ids(8, room as usize), "sampling_params": {"max_new_tokens": 1},
                "bootstrap_host": "2.2.2.2", "bootstrap_room": room});
            let (c, url, router) = (c.clone(), url.clone(), r.url.clone());
            async move {
                let (s, v) = support::http::post(&url, "/generate", body).await;
                assert_eq!(s, 200, "fake transfer straight to {url}: {v}");
                support::kv::blocks_of(&debug_index(&c, &router).await, &url) > 0
            }
        })
        .await;
    }
    let body =
        json!({"input_ids": ids(256, 9), "sampling_params": {"max_new_tokens": 4}}).to_string();
    let (s, got) = post_raw(&r.url, "/generate", &body).await;
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&got));
    let first: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(
        first["meta_info"]["cached_tokens"], 0,
        "a cold decode: {first}"
    );
    // Once the decode's blocks are in the index, the next sibling goes to the same decode,
    // which holds all but the last page of the prompt and receives only the delta.
    wait_index(&c, &r.url, "the first sibling's decode blocks", |v| {
        fleet
            .decode
            .iter()
            .any(|d| support::kv::blocks_of(v, &d.url) >= 64)
    })
    .await;
    let (s, got) = post_raw(&r.url, "/generate", &body).await;
    assert_eq!(s, 200);
    let second: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(
        second["meta_info"]["cached_tokens"], 252,
        "the prompt but its last token, page-aligned: {second}"
    );
    // The decode held that prefix itself: the prefill's last transfer moved one page
    // (4 tokens x 128 KiB at 25 GB/s).
    let mut last = Vec::new();
    for (p, _) in &fleet.prefill {
        let (_, l) = support::http::get(&p.url, "/v1/loads").await;
        last.push(
            l["loads"][0]["disaggregation"]["kv_transfer_latency_ms"]
                .as_f64()
                .unwrap(),
        );
    }
    let one_page = 4.0 * 131_072.0 / 25e9 * 1000.0;
    assert!(
        last.iter().any(|ms| (ms - one_page).abs() < 1e-9),
        "a one-page transfer: {last:?}"
    );
}
