//! `--metrics-compat sgl-router|smg`: after a few requests through a mock fleet (plain, streamed
//! and chat requests, a retry off a worker answering 503, and for sgl-router a KV-mode fleet for
//! cache hits/misses), the router's `/metrics` serves the sgl-router / SMG series dashboards
//! query, under their names and labels, beside the `kvrouter_*` ones; without the flag it serves
//! none of them.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use serde_json::{json, Value};
use support::http::{client, get_text, post_json};
use support::kv::warm_kv_pair;
use support::procs::{mock, router_with};
use support::stub::{Behaviour, Stub};
use support::wait::wait_for;

async fn post_ok(c: &reqwest::Client, url: String, body: Value) {
    let r = post_json(c, &url, &body).await;
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "{url}: {text}");
}

/// `/metrics` of a round-robin router over a 503 stub and a mock after plain, streamed and
/// chat requests (the stub's 503 is retried on the mock). Both serve the model `stub` (the
/// stub's name), which the `smg_*` series carry as `model`.
async fn fleet_metrics(extra: &[&str]) -> (String, String) {
    let stub = Stub::start(Behaviour::Status(503)).await;
    let m = mock(&["--speedup", "0", "--served-model-name", "stub"]);
    let mut args = vec!["--mode", "round-robin"];
    args.extend_from_slice(extra);
    let router = router_with(&[&stub.url, &m.url], &args).await;
    let c = client();
    let base = &router.url;
    for _ in 0..4 {
        let body = json!({"text": "hi", "sampling_params": {"max_new_tokens": 1}});
        post_ok(&c, format!("{base}/generate"), body).await;
    }
    let stream = json!({"text": "hi", "stream": true, "sampling_params": {"max_new_tokens": 2}});
    post_ok(&c, format!("{base}/generate"), stream.clone()).await;
    post_ok(&c, format!("{base}/generate"), stream).await;
    let chat =
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1});
    post_ok(&c, format!("{base}/v1/chat/completions"), chat.clone()).await;
    post_ok(&c, format!("{base}/v1/chat/completions"), chat).await;
    let text = get_text(&c, &format!("{base}/metrics")).await;
    assert!(
        text.contains("kvrouter_retries_total{"),
        "a retry happened: {text}"
    );
    (text, m.url.clone())
}

fn assert_has(text: &str, wanted: &[String]) {
    for w in wanted {
        assert!(
            text.contains(w.as_str()),
            "{w} missing from /metrics:\n{text}"
        );
    }
}

#[tokio::test]
async fn sgl_router_series_are_served() {
    let (text, mock) = fleet_metrics(&["--metrics-compat", "sgl-router"]).await;
    let worker = format!("worker=\"{mock}\"");
    assert_has(
        &text,
        &[
            "sgl_router_requests_total{route=\"/generate\"} 6".to_string(),
            "sgl_router_requests_total{route=\"/v1/chat/completions\"} 2".to_string(),
            "sgl_router_request_duration_seconds_bucket{route=\"/generate\",le=".to_string(),
            "sgl_router_generate_duration_seconds_count ".to_string(),
            "sgl_router_retries_total{route=\"/generate\"} ".to_string(),
            format!("sgl_router_running_requests{{{worker}}} 0"),
            format!("sgl_router_worker_health{{{worker}}} 1"),
            "sgl_router_active_workers 2".to_string(),
            format!("sgl_router_policy_decisions_total{{policy=\"round_robin\",{worker}}} "),
            format!("sgl_router_processed_requests_total{{{worker}}} "),
        ],
    );
    assert!(!text.contains("smg_"), "only the chosen flavour");
    assert!(
        text.contains("kvrouter_requests_total{"),
        "kvrouter_* are still served"
    );

    // Cache hits/misses come from KV-mode decisions: the same prompt twice.
    let pair = warm_kv_pair(&["--metrics-compat", "sgl-router"]).await;
    let (router, c) = (&pair.router, &pair.c);
    let prompt: Vec<u32> = (1..=64).collect();
    for _ in 0..3 {
        let body = json!({"input_ids": prompt, "sampling_params": {"max_new_tokens": 1}});
        post_ok(c, format!("{}/generate", router.url), body).await;
    }
    let url = format!("{}/metrics", router.url);
    let sample = |text: &str, name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0)
    };
    wait_for("cache hits and misses sum to the KV decisions", || {
        let (c, url) = (c.clone(), url.clone());
        async move {
            let text = get_text(&c, &url).await;
            sample(&text, "sgl_router_cache_hits_total ")
                + sample(&text, "sgl_router_cache_misses_total ")
                == 3
        }
    })
    .await;
    let text = get_text(c, &url).await;
    assert_has(
        &text,
        &[
            "# TYPE sgl_router_cache_hits_total counter".to_string(),
            "# TYPE sgl_router_cache_misses_total counter".to_string(),
            "sgl_router_policy_decisions_total{policy=\"cache_aware\",".to_string(),
        ],
    );
}

#[tokio::test]
async fn smg_series_are_served() {
    let (text, mock) = fleet_metrics(&["--metrics-compat", "smg"]).await;
    let worker = format!("worker=\"{mock}\"");
    let router = "backend_type=\"regular\",connection_mode=\"http\"";
    assert_has(
        &text,
        &[
            "smg_http_requests_total{method=\"POST\",path=\"/generate\"} 6".to_string(),
            "smg_http_requests_total{method=\"POST\",path=\"/v1/chat/completions\"} 2".to_string(),
            format!("smg_router_requests_total{{{router},endpoint=\"generate\",model=\"stub\",router_type=\"http\",streaming=\"true\"}} 2"),
            format!("smg_router_requests_total{{{router},endpoint=\"chat\",model=\"stub\",router_type=\"http\",streaming=\"false\"}} 2"),
            format!("smg_router_request_duration_seconds_bucket{{{router},endpoint=\"generate\","),
            "smg_http_request_duration_seconds_bucket{method=\"POST\",path=\"/generate\",".to_string(),
            "smg_router_ttft_seconds_count{backend_type=\"regular\",endpoint=\"generate\",model=\"stub\",router_type=\"http\"} 2".to_string(),
            "smg_worker_retries_total{endpoint=\"generate\",worker_type=\"regular\"} ".to_string(),
            "smg_worker_selection_total{connection_mode=\"http\",model=\"stub\",policy=\"round_robin\",worker_type=\"regular\"} ".to_string(),
            format!("smg_worker_requests_active{{{worker}}} 0"),
            format!("smg_worker_health{{{worker}}} 1"),
            "smg_worker_pool_size{connection_mode=\"http\",model=\"stub\",worker_type=\"regular\"} 2".to_string(),
        ],
    );
    assert!(!text.contains("sgl_router_"), "only the chosen flavour");
}

#[tokio::test]
async fn without_the_flag_only_kvrouter_series() {
    let (text, _) = fleet_metrics(&[]).await;
    assert!(
        !text.contains("sgl_router_") && !text.contains("smg_"),
        "{text}"
    );
}
