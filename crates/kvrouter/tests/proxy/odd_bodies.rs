//! Bodies the router does not need to understand reach the worker byte for byte (issue 12,
//! finding 10): invalid UTF-8 inside an unknown key's string and 100,000 levels of nesting
//! inside an unknown key, on each data-plane route, in KV mode. Invalid UTF-8 or over-deep
//! nesting inside a key the router reads for routing is a 400 `invalid_json` that never reaches
//! the worker, and the router keeps serving afterwards.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use bytes::Bytes;
use support::http::client;
use support::kv::{kv_mock, kv_router, wait_sources};
use support::procs::*;
use support::stub::*;

const ROUTES: [&str; 3] = ["/generate", "/v1/completions", "/v1/chat/completions"];

/// A valid body for `route` with `extra` (raw JSON bytes) as the value of an unknown key.
fn body_with_unknown(route: &str, extra: &[u8]) -> Vec<u8> {
    let head: &[u8] = match route {
        "/generate" => br#"{"input_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17],"zz_unknown":"#,
        "/v1/completions" => {
            br#"{"model":"m","prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17],"zz_unknown":"#
        }
        _ => br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"zz_unknown":"#,
    };
    [head, extra, b"}"].concat()
}

async fn post(url: &str, body: Vec<u8>) -> (u16, String, Bytes) {
    let resp = client()
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let code = resp
        .headers()
        .get("x-kvrouter-error-code")
        .map(|v| v.to_str().unwrap_or("").to_string())
        .unwrap_or_default();
    (status, code, resp.bytes().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_keys_with_invalid_utf8_or_deep_nesting_are_forwarded_byte_for_byte() {
    let stub = Stub::start(Behaviour::Bytes(Bytes::from_static(br#"{"text":"ok"}"#))).await;
    let r = router_with(&[&stub.url], &["--mode", "kv"]).await;
    let invalid_utf8: &[u8] = b"\"bytes \xff\xfe\xc3\x28 not utf-8\"";
    let depth = 100_000;
    let deep = [b"[".repeat(depth), b"]".repeat(depth)].concat();
    for route in ROUTES {
        for (what, extra) in [
            ("invalid UTF-8", invalid_utf8),
            ("100k-deep nesting", &deep[..]),
        ] {
            let body = body_with_unknown(route, extra);
            let (status, code, answer) = post(&format!("{}{route}", r.url), body.clone()).await;
            assert_eq!(status, 200, "{route} with {what}: {code} {answer:?}");
            let received = stub.received.lock().last().cloned().unwrap();
            assert_eq!(
                received.len(),
                body.len(),
                "{route} with {what}: length changed"
            );
            assert!(
                received.as_ref() == body.as_slice(),
                "{route} with {what}: bytes changed"
            );
        }
    }
    assert_eq!(stub.received.lock().len(), 6);
}

/// Against a real `sglang-mock` with KV events (KV routing on): invalid UTF-8 in a string the
/// router decodes is the router's own 400 `invalid_json`; 100k-deep nesting inside a read key
/// is a 400 (the router's, or the worker's when routing did not need to decode it: the body is
/// then forwarded as is); the router keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_or_deep_nesting_in_a_routing_key_is_a_400() {
    let mock = kv_mock(&["--speedup", "0"]);
    let r = kv_router(&[&mock.url], &[]);
    wait_sources(&client(), &r.url, 1).await;
    let utf8_cases: [(&str, &[u8]); 4] = [
        ("/generate", b"{\"text\":\"bad \xff utf-8\"}"),
        ("/generate", b"{\"input_ids\":[1,2],\"rid\":\"\xfe\"}"),
        (
            "/v1/completions",
            b"{\"model\":\"m\",\"prompt\":\"bad \xc3\x28\"}",
        ),
        (
            "/v1/chat/completions",
            b"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
        ),
    ];
    for (route, body) in utf8_cases {
        let (status, code, answer) = post(&format!("{}{route}", r.url), body.to_vec()).await;
        assert_eq!(
            (status, code.as_str()),
            (400, "invalid_json"),
            "{route}: {answer:?}"
        );
    }
    let depth = 100_000;
    let deep = [b"[".repeat(depth), b"]".repeat(depth)].concat();
    for (route, key) in [
        ("/generate", "input_ids"),
        ("/v1/completions", "prompt"),
        ("/v1/chat/completions", "messages"),
    ] {
        let body = [
            format!("{{\"model\":\"m\",\"{key}\":").as_bytes(),
            &deep,
            b"}",
        ]
        .concat();
        let (status, code, answer) = post(&format!("{}{route}", r.url), body).await;
        assert_eq!(status, 400, "{route} {key}: {code} {answer:?}");
    }
    let (status, _, answer) = post(
        &format!("{}/generate", r.url),
        br#"{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":2}}"#.to_vec(),
    )
    .await;
    assert_eq!(status, 200, "{answer:?}");
}
