//! sglang-mock HTTP surface: SGLang's cached_tokens rule, same-batch prefill misses,
//! batch /generate, SSE framing (generate and chat), weight updates, pause/continue,
//! info/load/metrics shapes, test hooks and error shapes.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion
#![allow(clippy::disallowed_methods)] // fixtures spawn their own tasks; `Tasks` is the router's

use crate::support;

use serde_json::{json, Value};
use support::http::{client, get_json, post, post_json, sse_data, status_of};
use support::sglang_rules::cached_rule;
use support::zmq::server_info;

fn cached(v: &Value) -> u64 {
    v["meta_info"]["cached_tokens"]
        .as_u64()
        .expect("cached_tokens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_prompt_is_cached_by_sglang_rule() {
    let m = support::mock(&["--speedup", "0", "--page-size", "16"]);
    for len in [16usize, 17, 40, 64] {
        let p: Vec<u32> = (0..len as u32).map(|i| 1000 + 7 * i + len as u32).collect();
        let body = json!({"input_ids": p, "sampling_params": {"max_new_tokens": 2}});
        let (s, first) = post(&m.url, "/generate", body.clone()).await;
        assert_eq!(s, 200);
        assert_eq!(cached(&first), 0);
        assert_eq!(first["meta_info"]["prompt_tokens"], len);
        assert_eq!(first["meta_info"]["completion_tokens"], 2);
        let (_, second) = post(&m.url, "/generate", body).await;
        assert_eq!(cached(&second) as usize, cached_rule(len, 16), "len {len}");
        assert_eq!(
            second["output_ids"], first["output_ids"],
            "deterministic output"
        );
    }
    // Text input goes through the tokenizer stand-in: 20 words = 20 tokens.
    let text: String = (0..20).map(|i| format!("w{i} ")).collect();
    let (_, a) = post(
        &m.url,
        "/generate",
        json!({"text": text, "sampling_params": {"max_new_tokens": 1}}),
    )
    .await;
    let (_, b) = post(
        &m.url,
        "/generate",
        json!({"text": text, "sampling_params": {"max_new_tokens": 1}}),
    )
    .await;
    assert_eq!(a["meta_info"]["prompt_tokens"], 20);
    assert_eq!(cached(&b), 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_prompts_in_one_prefill_batch_do_not_hit_each_other() {
    let m = support::mock(&["--speedup", "0", "--page-size", "4"]);
    let p: Vec<u32> = (1..=20).collect();
    let (s, out) = post(
        &m.url,
        "/generate",
        json!({"input_ids": [p, p], "sampling_params": {"max_new_tokens": 2}}),
    )
    .await;
    assert_eq!(s, 200);
    let arr = out.as_array().expect("batch returns a list");
    assert_eq!(arr.len(), 2);
    assert_eq!(cached(&arr[0]), 0);
    assert_eq!(cached(&arr[1]), 0, "admitted in the same prefill batch");
    let (_, later) = post(
        &m.url,
        "/generate",
        json!({"input_ids": p, "sampling_params": {"max_new_tokens": 2}}),
    )
    .await;
    assert_eq!(cached(&later), 16);
    // n=3 parallel samples: a list of 3 with distinct rids.
    let (_, n3) = post(&m.url, "/generate", json!({"input_ids": [9, 9, 9], "rid": "r", "sampling_params": {"n": 3, "max_new_tokens": 1}})).await;
    let ids: Vec<&str> = n3
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["meta_info"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["r_0", "r_1", "r_2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_prefill_counts_cache_like_sglang() {
    let m = support::mock(&[
        "--speedup",
        "0",
        "--page-size",
        "4",
        "--chunked-prefill-size",
        "8",
    ]);
    let p: Vec<u32> = (50..90).collect();
    let body = json!({"input_ids": p, "sampling_params": {"max_new_tokens": 1}});
    assert_eq!(cached(&post(&m.url, "/generate", body.clone()).await.1), 0);
    assert_eq!(cached(&post(&m.url, "/generate", body).await.1), 36);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_stream_is_cumulative_sse() {
    let m = support::mock(&["--speedup", "0"]);
    let r = post_json(&reqwest::Client::new(), &format!("{}/generate", m.url), &json!({"input_ids": [1, 2, 3], "stream": true, "return_logprob": true, "sampling_params": {"max_new_tokens": 4}})).await;
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let events = sse_data(&r.text().await.unwrap());
    assert_eq!(events.len(), 5);
    assert_eq!(events[4], "[DONE]");
    let chunks: Vec<Value> = events[..4]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    for (i, c) in chunks.iter().enumerate() {
        assert_eq!(
            c["output_ids"].as_array().unwrap().len(),
            i + 1,
            "cumulative ids"
        );
        assert_eq!(c["meta_info"]["completion_tokens"], i + 1);
        assert_eq!(
            c["meta_info"]["output_token_logprobs"]
                .as_array()
                .unwrap()
                .len(),
            i + 1
        );
    }
    assert!(chunks[2]["meta_info"]["finish_reason"].is_null());
    assert_eq!(
        chunks[3]["meta_info"]["finish_reason"],
        json!({"type": "length", "length": 4})
    );
    assert!(chunks[3]["meta_info"]["e2e_latency"].is_f64());
    assert!(chunks[2]["meta_info"].get("e2e_latency").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_stream_and_miles_shaped_chat() {
    let m = support::mock(&["--speedup", "0", "--page-size", "4"]);
    let r = post_json(&reqwest::Client::new(), &format!("{}/v1/chat/completions", m.url), &json!({"model": "x", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 3, "stream": true, "stream_options": {"include_usage": true}})).await;
    let events = sse_data(&r.text().await.unwrap());
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(
        content.split_whitespace().count(),
        3,
        "three incremental deltas"
    );
    let fin = &chunks[chunks.len() - 2];
    assert_eq!(fin["choices"][0]["finish_reason"], "length");
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 3);
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk" && c["model"] == "x"));

    // miles' session server: pre-tokenized input_ids, logprobs, return_meta_info.
    let body = json!({"model": "default", "messages": [{"role": "user", "content": "ignored when input_ids"}],
        "input_ids": (1..=13).collect::<Vec<u32>>(), "logprobs": true, "return_meta_info": true, "no_stop_trim": false, "max_tokens": 5});
    let (s, first) = post(&m.url, "/v1/chat/completions", body.clone()).await;
    assert_eq!(s, 200);
    let meta = &first["choices"][0]["meta_info"];
    assert_eq!(meta["completion_tokens"], 5);
    assert_eq!(meta["output_token_logprobs"].as_array().unwrap().len(), 5);
    assert!(first["choices"][0]["message"]["content"].is_string());
    let (_, second) = post(&m.url, "/v1/chat/completions", body).await;
    assert_eq!(
        second["usage"]["prompt_tokens_details"]["cached_tokens"],
        12
    );
    assert_eq!(second["choices"][0]["meta_info"]["cached_tokens"], 12);
    let (s, err) = post(&m.url, "/v1/chat/completions", json!({"messages": [{"role": "user", "content": "x"}], "stream": true, "return_meta_info": true})).await;
    assert_eq!(s, 400);
    assert_eq!(err["object"], "error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weight_updates_bump_version_and_flush() {
    let m = support::mock(&[
        "--speedup",
        "0",
        "--page-size",
        "4",
        "--weight-version",
        "7",
    ]);
    let p = json!({"input_ids": (1..=9).collect::<Vec<u32>>(), "sampling_params": {"max_new_tokens": 1}});
    post(&m.url, "/generate", p.clone()).await;
    assert_eq!(cached(&post(&m.url, "/generate", p.clone()).await.1), 8);
    let (s, r) = post(
        &m.url,
        "/update_weights_from_disk",
        json!({"model_path": "/m"}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(r["success"], true);
    let (_, info) = (
        200,
        reqwest::get(format!("{}/model_info", m.url))
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap(),
    );
    assert_eq!(info["weight_version"], "8");
    let (_, after) = post(&m.url, "/generate", p.clone()).await;
    assert_eq!(cached(&after), 0, "cache flushed by the update");
    assert_eq!(after["meta_info"]["weight_version"], "8");
    // Explicit version and flush_cache=false keeps the cache.
    let (s, r) = post(&m.url, "/update_weights_from_distributed", json!({"names": [], "dtypes": [], "shapes": [], "weight_version": "v2", "flush_cache": false})).await;
    assert_eq!((s, r["success"].clone()), (200, json!(true)));
    let (_, kept) = post(&m.url, "/generate", p.clone()).await;
    assert_eq!(kept["meta_info"]["weight_version"], "v2");
    assert_eq!(cached(&kept), 8);
    let (s, r) = post(
        &m.url,
        "/update_weight_version",
        json!({"new_version": "v3"}),
    )
    .await;
    assert_eq!((s, r["new_version"].clone()), (200, json!("v3")));
    let wv: Value = get_json(&client(), &format!("{}/get_weight_version", m.url)).await;
    assert_eq!(wv["weight_version"], "v3");
    // Injected failure, then success.
    assert_eq!(
        post(
            &m.url,
            "/mock/fail_next",
            json!({"path": "/update_weights_from_tensor"})
        )
        .await
        .0,
        200
    );
    let (s, r) = post(
        &m.url,
        "/update_weights_from_tensor",
        json!({"serialized_named_tensors": ["x"]}),
    )
    .await;
    assert_eq!((s, r["success"].clone()), (400, json!(false)));
    let (s, _) = post(
        &m.url,
        "/update_weights_from_tensor",
        json!({"serialized_named_tensors": ["x"]}),
    )
    .await;
    assert_eq!(s, 200);
    let (s, r) = post(&m.url, "/update_weights_from_disk", json!({})).await;
    assert_eq!(
        (s, r["success"].clone()),
        (400, json!(false)),
        "model_path is required"
    );
    assert_eq!(post(&m.url, "/init_weights_update_group", json!({"master_address": "127.0.0.1", "master_port": 1, "rank_offset": 1, "world_size": 2})).await.0, 200);
    assert_eq!(
        post(&m.url, "/destroy_weights_update_group", json!({}))
            .await
            .0,
        200
    );
    for path in ["/begin_weight_update", "/end_weight_update"] {
        assert_eq!(post(&m.url, path, json!({})).await.0, 200, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_retract_then_flush_and_continue() {
    let m = support::mock(&["--speedup", "1", "--page-size", "4"]);
    let client = reqwest::Client::new();
    let mut resp = post_json(&client, &format!("{}/generate", m.url), &json!({"input_ids": [1, 2, 3, 4, 5, 6], "stream": true, "sampling_params": {"max_new_tokens": 30, "ignore_eos": true}})).await;
    resp.chunk().await.unwrap().unwrap();
    let (s, r) = post(&m.url, "/pause_generation", json!({"mode": "retract"})).await;
    assert_eq!((s, r["status"].clone()), (200, json!("ok")));
    assert_eq!(
        client
            .post(format!("{}/flush_cache", m.url))
            .send()
            .await
            .unwrap()
            .status(),
        200,
        "retracted requests hold no KV"
    );
    assert_eq!(
        post(&m.url, "/pause_generation", json!({"mode": "bogus"}))
            .await
            .0,
        400
    );
    assert_eq!(post(&m.url, "/continue_generation", json!({})).await.0, 200);
    let mut rest = Vec::new();
    while let Some(c) = resp.chunk().await.unwrap() {
        rest.extend_from_slice(&c);
    }
    let rest = String::from_utf8(rest).unwrap();
    assert!(
        rest.contains("\"completion_tokens\":30"),
        "request resumed and finished"
    );
    assert!(rest.ends_with("data: [DONE]\n\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_load_metrics_and_errors() {
    let m = support::mock(&[
        "--speedup",
        "0",
        "--tp-size",
        "4",
        "--served-model-name",
        "qwen",
        "--model-path",
        "/models/q",
    ]);
    let info = server_info(&m.url).await;
    for k in [
        "page_size",
        "dp_size",
        "tp_size",
        "max_total_num_tokens",
        "max_running_requests",
        "chunked_prefill_size",
        "served_model_name",
        "model_path",
        "weight_version",
        "internal_states",
        "version",
        "status",
    ] {
        assert!(info.get(k).is_some(), "server_info has {k}");
    }
    assert_eq!(info["tp_size"], 4);
    assert!(info["kv_events_config"].is_null());
    let models: Value = get_json(&client(), &format!("{}/v1/models", m.url)).await;
    assert_eq!(models["data"][0]["id"], "qwen");
    // SGLang 0.5.23 has no /get_load (the mock answers 404 unless --sglang-version 0.5.9).
    let gone = reqwest::get(format!("{}/get_load", m.url)).await.unwrap();
    assert_eq!(gone.status(), 404);
    let load: Value = get_json(&client(), &format!("{}/v1/loads", m.url)).await;
    assert_eq!(load["loads"][0]["dp_rank"], 0);
    assert!(load["loads"][0]["num_running_reqs"].is_u64());
    let loads = reqwest::get(format!("{}/v1/loads?include=core", m.url))
        .await
        .unwrap();
    assert_eq!(loads.status(), 200);
    assert_eq!(
        reqwest::get(format!("{}/v1/loads?include=nope", m.url))
            .await
            .unwrap()
            .status(),
        400
    );
    post(
        &m.url,
        "/generate",
        json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}),
    )
    .await;
    let metrics = reqwest::get(format!("{}/metrics", m.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:cache_hit_rate",
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
        "sglang:cached_tokens_total",
        "sglang:num_requests_total",
        "sglang:time_to_first_token_seconds",
    ] {
        assert!(metrics.contains(name), "metrics has {name}");
    }
    assert!(metrics.contains("sglang:generation_tokens_total{model_name=\"qwen\"} 2"));
    // Error shapes.
    let (s, e) = post(&m.url, "/generate", json!({"input_ids": [1], "text": "x"})).await;
    assert_eq!(s, 400);
    assert!(e["error"]["message"].is_string());
    let (s, e) = post(
        &m.url,
        "/generate",
        json!({"input_ids": [1], "sampling_params": {"max_new_tokens": -1}}),
    )
    .await;
    assert_eq!((s, e["error"]["message"].is_string()), (400, true));
    let (s, e) = post(&m.url, "/generate", json!({"input_ids": [99999999]})).await;
    assert_eq!((s, e["error"]["message"].is_string()), (400, true));
    let r = reqwest::Client::new()
        .post(format!("{}/generate", m.url))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let (s, e) = post(&m.url, "/v1/completions", json!({"prompt": 5})).await;
    assert_eq!(
        (s, e["object"].clone(), e["code"].clone()),
        (400, json!("error"), json!(400))
    );
    let (s, _) = post(&m.url, "/generate", json!({"input_ids": [1, 2], "unknown_field": {"a": 1}, "sampling_params": {"max_new_tokens": 1, "whatever": 3}})).await;
    assert_eq!(s, 200, "unknown fields are ignored");
    let c = reqwest::Client::new();
    assert_eq!(status_of(c.get(format!("{}/generate", m.url))).await, 405);
    assert_eq!(status_of(c.get(format!("{}/nope", m.url))).await, 404);
    // Health hook.
    assert_eq!(
        reqwest::get(format!("{}/health", m.url))
            .await
            .unwrap()
            .status(),
        200
    );
    post(&m.url, "/mock/set_health", json!({"healthy": false})).await;
    assert_eq!(
        reqwest::get(format!("{}/health_generate", m.url))
            .await
            .unwrap()
            .status(),
        503
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_and_warmup() {
    let m = support::mock(&[
        "--speedup",
        "0",
        "--api-key",
        "sekret",
        "--warmup-secs",
        "600",
    ]);
    let c = reqwest::Client::new();
    assert_eq!(status_of(c.get(format!("{}/model_info", m.url))).await, 401);
    let r = c
        .get(format!("{}/health", m.url))
        .bearer_auth("sekret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503, "still warming up");
    let r = c
        .get(format!("{}/model_info", m.url))
        .bearer_auth("sekret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_tokens_abort_all_and_counters_agree() {
    let m = support::mock(&["--speedup", "0", "--page-size", "4"]);
    let p: Vec<u32> = (300..311).collect();
    let (_, free) = post(
        &m.url,
        "/generate",
        json!({"input_ids": p, "sampling_params": {"max_new_tokens": 5}}),
    )
    .await;
    let third = free["output_ids"][2].clone();
    let (_, stopped) = post(&m.url, "/generate", json!({"input_ids": p, "sampling_params": {"max_new_tokens": 5, "stop_token_ids": [third]}})).await;
    assert_eq!(
        stopped["meta_info"]["finish_reason"],
        json!({"type": "stop", "matched": third})
    );
    assert_eq!(stopped["meta_info"]["completion_tokens"], 3);
    let (_, ignored) = post(&m.url, "/generate", json!({"input_ids": p, "sampling_params": {"max_new_tokens": 5, "stop_token_ids": [third], "ignore_eos": true}})).await;
    assert_eq!(ignored["meta_info"]["completion_tokens"], 5);

    // Counters agree with the responses' meta_info (what loadgen compares against).
    let metrics = reqwest::get(format!("{}/metrics", m.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |name: &str| -> u64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    let cached_sum: u64 = [&free, &stopped, &ignored].iter().map(|v| cached(v)).sum();
    assert_eq!(value("sglang:cached_tokens_total"), cached_sum);
    assert_eq!(value("sglang:prompt_tokens_total"), 33);
    assert_eq!(value("sglang:generation_tokens_total"), 13);
    assert_eq!(value("sglang:num_requests_total"), 3);

    // pause(abort) ends requests in flight with finish_reason abort (simulated time keeps
    // the long request running).
    let m = support::mock(&["--speedup", "1"]);
    let c = reqwest::Client::new();
    let url = m.url.clone();
    let long = tokio::spawn(async move {
        post(&url, "/generate", json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 5000000, "ignore_eos": true}})).await
    });
    // Wait until the request is running (readiness via the engine's own counters).
    loop {
        let st: Value = support::http::get_json(&c, &format!("{}/mock/state", m.url)).await;
        if st["ranks"][0]["running"].as_u64() == Some(1) {
            break;
        }
        tokio::task::yield_now().await;
    }
    let (s, _) = post(&m.url, "/pause_generation", json!({"mode": "abort"})).await;
    assert_eq!(s, 200);
    let (s, body) = long.await.unwrap();
    assert_eq!(s, 200);
    assert_eq!(body["meta_info"]["finish_reason"]["type"], "abort");
    assert_eq!(post(&m.url, "/continue_generation", json!({})).await.0, 200);
    let (s, _) = post(
        &m.url,
        "/generate",
        json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 1}}),
    )
    .await;
    assert_eq!(s, 200, "serves again after continue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_start_serves() {
    use clap::Parser;
    let args =
        kvrouter_sim::mock::MockArgs::parse_from(["sglang-mock", "--port", "0", "--speedup", "0"]);
    let mock = kvrouter_sim::mock::start(args).await.expect("start");
    let (s, body) = post(
        &mock.url,
        "/generate",
        json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(body["meta_info"]["completion_tokens"], 2);
    mock.server.abort();
}

/// Like SGLang's uvicorn (`SGLANG_TIMEOUT_KEEP_ALIVE`), the mock keeps a connection for the
/// next request but closes it once it sat idle for `--timeout-keep-alive` seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_the_timeout() {
    use tokio::io::AsyncWriteExt;
    let m = support::mock(&["--speedup", "0", "--timeout-keep-alive", "0.3"]);
    let addr = m.url.trim_start_matches("http://").to_string();
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let req = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    s.write_all(req).await.unwrap();
    s.write_all(req).await.unwrap();
    // Panics if the idle connection is never closed.
    let got = support::http::read_to_close(&mut s).await;
    let text = String::from_utf8_lossy(&got);
    assert_eq!(
        text.matches("HTTP/1.1 200").count(),
        2,
        "both requests answered on one connection: {text}"
    );
}
