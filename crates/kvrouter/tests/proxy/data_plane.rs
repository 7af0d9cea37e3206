//! Data plane through a real router: byte-exact bodies both ways, SSE relay, the worker
//! header, sticky routing keys, the three endpoints against `sglang-mock`, and error shapes.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use bytes::Bytes;
use futures::StreamExt;
use serde_json::{json, Value};
use support::admin::*;
use support::http::{client, post_json};
use support::procs::*;
use support::stub::*;

/// A body with unknown fields, odd spacing, key order, escapes and a number serde would
/// re-format: it must reach the worker byte for byte, and the answer must come back so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_are_forwarded_and_returned_byte_for_byte() {
    let answer = Bytes::from_static(
        br#"{ "text" : "ok",  "meta_info":{"routed_experts":"AAAAAQ==","weird":1.0e+2,"z":null,"a":[ ]},"unknown_top":{"k":"\u00e9"} }"#,
    );
    let stub = Stub::start(Behaviour::Bytes(answer.clone())).await;
    let r = router_with(&[&stub.url], &["--mode", "round-robin"]).await;
    let body: &[u8] = br#"{"input_ids":[1, 2,3],"return_meta_info":true,"custom_params":{"x":1.50,"y":"\ud83d\ude00"},"rid":"abc","zz_unknown":[{"deep":[1e3]}]}"#;
    let resp = client()
        .post(format!("{}/generate", r.url))
        .header("content-type", "application/json")
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-kvrouter-worker"], stub.url.as_str());
    assert_eq!(resp.headers()["x-stub-header"], "kept");
    let got = resp.bytes().await.unwrap();
    assert_eq!(got, answer, "response body changed");
    assert_eq!(
        stub.received.lock().last().unwrap().as_ref(),
        body,
        "request body changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_chat_and_completions_reach_the_mock_with_meta_info() {
    let m = fast_mock();
    let r = router_with(&[&m.url], &[]).await;
    let c = client();
    // Same request directly and through the router: identical apart from timing fields.
    let body = json!({"text":"hello world","rid":"same-rid","sampling_params":{"max_new_tokens":4},
                      "return_logprob":true,"an_unknown_field":{"kept":true}});
    let direct: Value = c
        .post(format!("{}/generate", m.url))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let resp = post_json(&c, &format!("{}/generate", r.url), &body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-kvrouter-worker"], m.url.as_str());
    let routed: Value = resp.json().await.unwrap();
    let strip = |mut v: Value| {
        let mi = v["meta_info"].as_object_mut().unwrap();
        for timing in [
            "e2e_latency",
            "queue_time",
            "prefill_launch_delay",
            "prefill_launch_latency",
        ] {
            mi.remove(timing);
        }
        mi.remove("cached_tokens");
        mi.remove("cached_tokens_details");
        v
    };
    assert_eq!(routed["meta_info"]["id"], "same-rid");
    assert!(
        routed["meta_info"]["output_token_logprobs"].is_array(),
        "{routed}"
    );
    assert_eq!(strip(routed), strip(direct));

    let chat = json!({"model":"default","messages":[{"role":"user","content":"hi"}],
                      "max_tokens":3,"return_meta_info":true,"logprobs":true});
    let resp = post_json(&c, &format!("{}/v1/chat/completions", r.url), &chat).await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert!(v["choices"][0]["message"]["content"].is_string(), "{v}");
    assert!(
        v["choices"][0]["meta_info"].is_object(),
        "meta_info survives: {v}"
    );

    let comp = json!({"model":"default","prompt":"abc","max_tokens":2});
    let resp = post_json(&c, &format!("{}/v1/completions", r.url), &comp).await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert!(v["choices"][0]["text"].is_string(), "{v}");

    // A 4xx from the worker passes through unchanged and does not make it unhealthy.
    let bad = json!({"text":"x","sampling_params":{"max_new_tokens":-5}});
    let direct = post_json(&c, &format!("{}/generate", m.url), &bad).await;
    let direct_status = direct.status();
    let direct_body = direct.bytes().await.unwrap();
    let resp = post_json(&c, &format!("{}/generate", r.url), &bad).await;
    assert!(
        direct_status.is_client_error(),
        "mock rejects it: {direct_status}"
    );
    assert_eq!(resp.status(), direct_status);
    assert_eq!(resp.bytes().await.unwrap(), direct_body);
    assert_eq!(healthy_count(&r.url).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_is_relayed_chunk_by_chunk() {
    let m = fast_mock();
    let r = router_with(&[&m.url], &[]).await;
    let body = json!({"text":"stream me","stream":true,"sampling_params":{"max_new_tokens":5}});
    let resp = post_json(&client(), &format!("{}/generate", r.url), &body).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    assert_eq!(resp.headers()["x-kvrouter-worker"], m.url.as_str());
    let mut all = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        all.extend_from_slice(&chunk.expect("clean stream"));
    }
    let text = String::from_utf8(all).unwrap();
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.len(), 6, "5 tokens + [DONE]: {text}");
    assert_eq!(*events.last().unwrap(), "data: [DONE]");
    for e in &events[..5] {
        let v: Value = serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap();
        assert!(v["meta_info"].is_object());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_key_sticks_to_one_worker() {
    let (a, b) = (fast_mock(), fast_mock());
    let r = router_with(&[&a.url, &b.url], &["--mode", "round-robin"]).await;
    let c = client();
    let mut seen = std::collections::HashMap::<String, std::collections::HashSet<String>>::new();
    for i in 0..12 {
        let key = format!("session-{}", i % 3);
        let resp = c
            .post(format!("{}/generate", r.url))
            .header("X-SMG-Routing-Key", &key)
            .json(&json!({"text":"hi","sampling_params":{"max_new_tokens":1}}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let w = resp.headers()["x-kvrouter-worker"]
            .to_str()
            .unwrap()
            .to_string();
        seen.entry(key).or_default().insert(w);
    }
    for (key, ws) in &seen {
        assert_eq!(ws.len(), 1, "{key} went to {ws:?}");
    }
    // Without a key, round-robin uses both workers.
    let mut used = std::collections::HashSet::new();
    for _ in 0..4 {
        let resp = post_json(
            &c,
            &format!("{}/generate", r.url),
            &json!({"text":"hi","sampling_params":{"max_new_tokens":1}}),
        )
        .await;
        used.insert(
            resp.headers()["x-kvrouter-worker"]
                .to_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(used.len(), 2);
    let metrics = support::http::get_text(&c, &format!("{}/metrics", r.url)).await;
    assert!(metrics.contains("kvrouter_sticky_keys 3"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_errors_have_the_error_shape() {
    let m = fast_mock();
    let r = router_with(&[&m.url], &["--max-payload-size", "1000"]).await;
    let c = client();
    let post = |path: &str, body: Vec<u8>| c.post(format!("{}{path}", r.url)).body(body).send();

    let resp = post("/generate", b"{not json".to_vec()).await.unwrap();
    assert_eq!(resp.status(), 400);
    assert_error_shape(&resp.json().await.unwrap(), "invalid_json");

    let resp = post("/generate", br#"{"sampling_params":{}}"#.to_vec())
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_error_shape(&resp.json().await.unwrap(), "missing_prompt");

    let resp = post("/v1/chat/completions", br#"{"model":"m"}"#.to_vec())
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_error_shape(&resp.json().await.unwrap(), "missing_prompt");

    let big = format!(r#"{{"text":"{}"}}"#, "x".repeat(5000));
    let resp = post("/generate", big.into_bytes()).await.unwrap();
    assert_eq!(resp.status(), 413);
    assert_error_shape(&resp.json().await.unwrap(), "payload_too_large");

    // Oversized without content-length (chunked upload) is refused too.
    let chunks = futures::stream::iter(
        (0..20).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b' '; 100]))),
    );
    let resp = c
        .post(format!("{}/generate", r.url))
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);

    assert_error(c.get(format!("{}/no/such/route", r.url)), 404, "not_found").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_guard_data_and_admin_routes() {
    let m = fast_mock();
    let r = start_router(&[
        "--worker-urls",
        &m.url,
        "--api-key",
        "data-key",
        "--admin-api-key",
        "admin-key",
    ]);
    let c = client();
    wait_ready(&r.url, "worker healthy").await;
    let body = json!({"text":"hi","sampling_params":{"max_new_tokens":1}});
    assert_error(
        c.post(format!("{}/generate", r.url)).json(&body),
        401,
        "invalid_api_key",
    )
    .await;
    let resp = c
        .post(format!("{}/generate", r.url))
        .bearer_auth("admin-key")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let resp = c
        .post(format!("{}/generate", r.url))
        .bearer_auth("data-key")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let resp = c
        .get(format!("{}/workers", r.url))
        .bearer_auth("data-key")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let resp = c
        .get(format!("{}/workers", r.url))
        .bearer_auth("admin-key")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let resp = c.get(format!("{}/health", r.url)).send().await.unwrap();
    assert_eq!(resp.status(), 200);
}
