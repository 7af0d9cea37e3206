//! Client-grown state and abort isolation (issue 25, items 2 and 3): a client's disconnect
//! abort never names another client's in-flight rid (SGLang aborts by rid prefix), and request
//! bodies in flight share one memory budget (`--max-inflight-body-bytes`, 503 beyond it).
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use futures::StreamExt;
use serde_json::json;
use support::admin::*;
use support::http::{client, connect, post_json};
use support::procs::*;
use support::wait::wait_for;
use tokio::io::AsyncWriteExt;

async fn metric(router: &str, key: &str) -> u64 {
    support::http::metric(router, key).await as u64
}

/// The last SSE event's `meta_info.finish_reason.type` of a `/generate` stream.
fn last_finish_type(sse: &str) -> Option<String> {
    support::http::sse_events(sse).pop().and_then(|v| {
        v["meta_info"]["finish_reason"]["type"]
            .as_str()
            .map(str::to_string)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_abort_never_names_another_clients_rid() {
    // A real-speed mock, so both requests are still generating when the attacker leaves.
    let m = mock(&[]);
    let r = router_with(&[&m.url], &[]).await;
    let c = client();
    let victim = c
        .post(format!("{}/generate", r.url))
        .json(&json!({"text":"victim","rid":"victim-1","stream":true,
                      "sampling_params":{"max_new_tokens":64,"ignore_eos":true}}))
        .send()
        .await
        .unwrap();
    let mut victim = victim.bytes_stream();
    let mut seen = String::from_utf8_lossy(&victim.next().await.unwrap().unwrap()).into_owned();

    // The attacker's rid is a prefix of the victim's: SGLang's abort would match both.
    let attacker = c
        .post(format!("{}/generate", r.url))
        .json(&json!({"text":"attacker","rid":"v","stream":true,
                      "sampling_params":{"max_new_tokens":100000,"ignore_eos":true}}))
        .send()
        .await
        .unwrap();
    let mut attacker = attacker.bytes_stream();
    attacker.next().await.unwrap().unwrap();
    drop(attacker);
    let ru = r.url.clone();
    wait_for("the attacker's booking released", || {
        let ru = ru.clone();
        async move { workers(&ru).await["workers"][0]["in_flight"] == 1 }
    })
    .await;

    while let Some(chunk) = victim.next().await {
        seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    assert_eq!(
        last_finish_type(&seen).as_deref(),
        Some("length"),
        "the victim must run to completion: {seen}"
    );
    assert!(
        metric(
            &r.url,
            "kvrouter_abort_skipped_total{reason=\"prefix_of_other_rid\"}"
        )
        .await
            >= 1
    );
    // The attacker's request was kept running (its connection held, not closed: SGLang aborts
    // a disconnected request by prefix too), and nothing was aborted.
    let (running, _) = support::http::mock_load(&m.url).await;
    assert_eq!(running, 1, "the attacker's request still runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_rid_is_still_aborted_on_disconnect() {
    let m = mock(&[]);
    let r = router_with(&[&m.url], &[]).await;
    let resp = client()
        .post(format!("{}/generate", r.url))
        .json(&json!({"text":"long","rid":"alone","stream":true,
                      "sampling_params":{"max_new_tokens":100000,"ignore_eos":true}}))
        .send()
        .await
        .unwrap();
    let mut s = resp.bytes_stream();
    s.next().await.unwrap().unwrap();
    drop(s);
    let mu = m.url.clone();
    wait_for("the mock stopped the request", || {
        let mu = mu.clone();
        async move { support::http::mock_load(&mu).await == (0, 0) }
    })
    .await;
    // Nothing withheld: the abort was sent and the connection closed (no drain).
    let text = support::http::get_text(&client(), &format!("{}/metrics", r.url)).await;
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("kvrouter_abort_skipped_total{") && !l.ends_with(" 0")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_in_flight_beyond_the_budget_get_503_naming_the_limit() {
    let m = fast_mock();
    let budget = 1 << 20;
    let r = router_with(
        &[&m.url],
        &[
            "--max-inflight-body-bytes",
            &budget.to_string(),
            "--max-payload-size",
            &budget.to_string(),
        ],
    )
    .await;
    // A slow upload announcing 800 KiB (its buffer's allocation, taken from the 1 MiB budget)
    // sends 700 KiB and stops.
    let announced = 800 << 10;
    let mut slow = connect(&r.url).await;
    slow.write_all(
        format!(
            "POST /generate HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n\
             content-length: {announced}\r\n\r\n{{\"text\":\""
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    slow.write_all(&vec![b'a'; 700 << 10]).await.unwrap();
    let ru = r.url.clone();
    wait_for("the slow upload's bytes are counted", || {
        let ru = ru.clone();
        async move { metric(&ru, "kvrouter_inflight_body_bytes").await >= 600 << 10 }
    })
    .await;

    // A 600 KiB body does not fit next to it: 503 naming the limit.
    let big = format!("{{\"text\":\"{}\"}}", "b".repeat(600 << 10));
    let v = assert_error(
        client()
            .post(format!("{}/generate", r.url))
            .header("content-type", "application/json")
            .body(big),
        503,
        "inflight_body_budget",
    )
    .await;
    assert!(v.to_string().contains("max_inflight_body_bytes"), "{v}");
    assert!(
        metric(
            &r.url,
            "kvrouter_limit_trips_total{limit=\"max_inflight_body_bytes\"}"
        )
        .await
            >= 1
    );

    // A small request still fits and is served.
    let resp = post_json(
        &client(),
        &format!("{}/generate", r.url),
        &json!({"text":"small","sampling_params":{"max_new_tokens":2}}),
    )
    .await;
    assert_eq!(resp.status(), 200);

    // The slow upload leaves: its bytes return to the budget.
    drop(slow);
    let ru = r.url.clone();
    wait_for("the budget is free again", || {
        let ru = ru.clone();
        async move { metric(&ru, "kvrouter_inflight_body_bytes").await == 0 }
    })
    .await;
}
