//! Text routing in KV mode against real `sglang-mock` processes in real-tokenizer mode
//! (`--tokenizer-path`, the same tokenizer.json and chat template as the router): an agent
//! chat session sent as OpenAI messages only lands on one worker and every turn's
//! `cached_tokens` equals the overlap the router predicted; without a tokenizer, identical and
//! prefix-sharing text prompts keep their worker through approximate text pages (shorter ones
//! are routed by load) and each path is counted; a worker's local model path is picked up.
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

use crate::support;

use std::time::Duration;

use kvrouter::text::fixture;
use serde_json::{json, Value};
use support::http::{client, metrics, post_json};
use support::kv::*;
use support::loadgen::metric_sum;
use support::wait::Deadline;

const PAGE: u64 = 4;
const VOCAB: usize = 4096;

fn model_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fixture::write_model_dir(dir.path(), &fixture::wordlevel_json(VOCAB), fixture::CHATML).unwrap();
    dir
}

fn words(from: u32, n: u32) -> String {
    (from..from + n)
        .map(|i| format!("t{}", i % VOCAB as u32))
        .collect::<Vec<_>>()
        .join(" ")
}

fn series(page: &str, line_prefix: &str) -> u64 {
    page.lines()
        .filter(|l| l.starts_with(line_prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Sends one chat turn through the router: (worker, cached_tokens, prompt_tokens,
/// completion_tokens, assistant text).
async fn turn(
    c: &reqwest::Client,
    router: &str,
    messages: &[Value],
) -> (String, u64, u64, u64, String) {
    let resp = c
        .post(format!("{router}/v1/chat/completions"))
        .json(
            &json!({"model": "m", "messages": messages, "max_tokens": 6, "ignore_eos": true,
                      "return_meta_info": true}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let worker = resp.headers()["x-kvrouter-worker"]
        .to_str()
        .unwrap()
        .to_string();
    let body: Value = resp.json().await.unwrap();
    let usage = &body["usage"];
    (
        worker,
        usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0),
        usage["prompt_tokens"].as_u64().unwrap(),
        usage["completion_tokens"].as_u64().unwrap(),
        body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_chat_session_stays_on_one_worker_and_cached_tokens_match_the_prediction() {
    let dir = model_dir();
    let path = dir.path().to_str().unwrap();
    let vocab = VOCAB.to_string();
    let mock_args = [
        "--speedup",
        "0",
        "--tokenizer-path",
        path,
        "--vocab-size",
        &vocab,
    ];
    let a = kv_mock(&mock_args);
    let b = kv_mock(&mock_args);
    let router = kv_router(&[&a.url, &b.url], &["--model-path", path]);
    let c = client();
    wait_sources(&c, &router.url, 2).await;
    let mut messages = vec![
        json!({"role": "system", "content": words(300, 120)}),
        json!({"role": "user", "content": words(1000, 40)}),
    ];
    let mut first_worker = None;
    for t in 0..8u32 {
        let before = metrics(&router.url).await;
        let (worker, cached, prompt, completion, reply) = turn(&c, &router.url, &messages).await;
        // The router books and reports once the response has ended.
        let deadline = Deadline::after(Duration::from_secs(30));
        let after = loop {
            let page = metrics(&router.url).await;
            if series(&page, "kvrouter_kv_hit_reports_total{result=\"reported\"}")
                > series(
                    &before,
                    "kvrouter_kv_hit_reports_total{result=\"reported\"}",
                )
            {
                break page;
            }
            deadline.check("the router's hit report");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let predicted = metric_sum(&after, "kvrouter_kv_predicted_hit_tokens_total")
            - metric_sum(&before, "kvrouter_kv_predicted_hit_tokens_total");
        let actual = metric_sum(&after, "kvrouter_kv_actual_hit_tokens_total")
            - metric_sum(&before, "kvrouter_kv_actual_hit_tokens_total");
        assert_eq!(actual, cached, "turn {t}");
        assert_eq!(
            predicted, cached,
            "turn {t}: predicted {predicted}, worker reported {cached}"
        );
        if t > 0 {
            assert!(
                cached >= prompt / 2,
                "turn {t}: only {cached} of {prompt} cached"
            );
        }
        assert_eq!(
            *first_worker.get_or_insert(worker.clone()),
            worker,
            "turn {t}"
        );
        // Wait until the router has the worker's blocks of this turn (prompt and output).
        let expect = (prompt + completion - 1) / PAGE - 1;
        wait_index(&c, &router.url, "the turn's blocks", |v| {
            blocks_of(v, &worker) >= expect
        })
        .await;
        messages.push(json!({"role": "assistant", "content": reply}));
        messages.push(json!({"role": "user", "content": words(2000 + 50 * t, 30)}));
    }
    let page = metrics(&router.url).await;
    assert_eq!(
        series(
            &page,
            "kvrouter_text_requests_total{kind=\"chat\",outcome=\"tokenized\"}"
        ),
        8
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_tokenizer_short_text_is_routed_by_load_and_counted() {
    let a = kv_mock(&["--speedup", "0"]);
    let router = kv_router(&[&a.url], &[]);
    let c = client();
    wait_sources(&c, &router.url, 1).await;
    // The chat body's messages JSON fills a text page (4 tokens of 4 bytes); the generate
    // text is shorter than one: nothing to hash, routed by load.
    let (_, _, _, _, _) = turn(&c, &router.url, &[json!({"role": "user", "content": ""})]).await;
    let resp = post_json(
        &c,
        &format!("{}/generate", router.url),
        &json!({"text": "hello there", "sampling_params": {"max_new_tokens": 2}}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let page = metrics(&router.url).await;
    assert_eq!(
        series(
            &page,
            "kvrouter_kv_no_tokens_total{reason=\"no_token_ids\"}"
        ),
        1
    );
    assert_eq!(
        series(&page, "kvrouter_routing_input_total{source=\"none\"}"),
        1
    );
    assert_eq!(
        series(
            &page,
            "kvrouter_routing_input_total{source=\"text_approx\"}"
        ),
        1
    );
    assert_eq!(metric_sum(&page, "kvrouter_text_requests_total"), 2);
    assert_eq!(
        series(
            &page,
            "kvrouter_text_requests_total{kind=\"chat\",outcome=\"no_tokenizer\"}"
        ),
        1
    );
}

/// Deterministic text of about `chars` bytes from `seed` (distinct seeds differ from the start).
fn text(seed: u32, chars: usize) -> String {
    let mut s = format!("s{seed}:");
    let mut i = 0u32;
    while s.len() < chars {
        s.push_str(&format!(" w{}", (seed * 7919 + i * 31) % 10_000));
        i += 1;
    }
    s
}

/// Sends `body` to `path` through the router; the worker it went to.
async fn routed(c: &reqwest::Client, router: &str, path: &str, body: &Value) -> String {
    let resp = post_json(c, &format!("{router}{path}"), body).await;
    assert_eq!(resp.status(), 200, "{path}");
    resp.headers()["x-kvrouter-worker"]
        .to_str()
        .unwrap()
        .to_string()
}

fn generate_text(t: &str) -> Value {
    json!({"text": t, "sampling_params": {"max_new_tokens": 2}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_tokenizer_text_prompts_keep_their_worker_by_approximate_text_pages() {
    let a = kv_mock(&["--speedup", "0"]);
    let b = kv_mock(&["--speedup", "0"]);
    let router = kv_router(&[&a.url, &b.url], &[]);
    let c = client();
    wait_sources(&c, &router.url, 2).await;
    let shared = text(1, 600);
    let chat = json!({"model": "m", "max_tokens": 2,
                      "messages": [{"role": "user", "content": text(2, 600)}]});
    let completion = json!({"model": "m", "max_tokens": 2, "prompt": text(3, 600)});
    let mut sent = 0;
    for (path, body) in [
        ("/generate", generate_text(&shared)),
        ("/v1/chat/completions", chat),
        ("/v1/completions", completion),
    ] {
        let mut workers = std::collections::BTreeSet::new();
        for _ in 0..12 {
            workers.insert(routed(&c, &router.url, path, &body).await);
            sent += 1;
        }
        assert_eq!(
            workers.len(),
            1,
            "12 identical {path} prompts went to {workers:?}"
        );
    }
    // Prompts that extend the shared text follow it.
    let home = routed(&c, &router.url, "/generate", &generate_text(&shared)).await;
    sent += 1;
    for i in 0..6 {
        let longer = format!("{shared} then question {i}: {}", text(100 + i, 60));
        let worker = routed(&c, &router.url, "/generate", &generate_text(&longer)).await;
        assert_eq!(worker, home, "prefix-sharing prompt {i}");
        sent += 1;
    }
    // Distinct prompts (no shared page) are spread by load.
    let distinct = (0..12u32).map(|i| {
        let (c, url) = (c.clone(), router.url.clone());
        async move { routed(&c, &url, "/generate", &generate_text(&text(1000 + i, 600))).await }
    });
    let workers: std::collections::BTreeSet<String> = futures::future::join_all(distinct)
        .await
        .into_iter()
        .collect();
    sent += 12;
    assert_eq!(
        workers.len(),
        2,
        "12 distinct prompts all went to {workers:?}"
    );
    let page = metrics(&router.url).await;
    assert_eq!(
        series(
            &page,
            "kvrouter_routing_input_total{source=\"text_approx\"}"
        ),
        sent
    );
    assert_eq!(
        series(
            &page,
            "kvrouter_kv_no_tokens_total{reason=\"no_token_ids\"}"
        ),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_local_model_path_provides_the_tokenizer() {
    let dir = model_dir();
    let path = dir.path().to_str().unwrap();
    let vocab = VOCAB.to_string();
    let a = kv_mock(&[
        "--speedup",
        "0",
        "--model-path",
        path,
        "--tokenizer-path",
        path,
        "--vocab-size",
        &vocab,
    ]);
    let router = kv_router(&[&a.url], &[]);
    let c = client();
    wait_sources(&c, &router.url, 1).await;
    let resp = post_json(
        &c,
        &format!("{}/generate", router.url),
        &json!({"text": words(10, 64), "sampling_params": {"max_new_tokens": 2}}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let page = metrics(&router.url).await;
    assert_eq!(
        series(
            &page,
            "kvrouter_text_requests_total{kind=\"text\",outcome=\"tokenized\"}"
        ),
        1
    );
    assert_eq!(
        series(
            &page,
            "kvrouter_kv_no_tokens_total{reason=\"no_token_ids\"}"
        ),
        0
    );
}
