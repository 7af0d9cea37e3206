//! The loadgen library against an in-process stub SGLang server (no mock needed):
//! request shapes, SSE reading, worker attribution, hit-rate accounting, failures,
//! timeouts and the run's duration bound.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use kvrouter_sim::loadgen::{
    run_until, run_with_records, AgentConfig, CancellationToken, Endpoint, GrpoConfig,
    LoadgenConfig, RequestStatus, TraceConfig, Workload,
};
use parking_lot::Mutex;
use serde_json::{json, Value};

/// How the stub answers.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Like SGLang: whole prompts seen before count as cached (page 16, last token recomputed).
    Serve,
    /// Every request gets 400 `{"error":{"message":"bad request"}}`.
    Reject,
    /// Never answers.
    Hang,
}

#[derive(Default)]
struct Seen {
    prompts: HashSet<Vec<u64>>,
    prompt_tokens: u64,
    cached_tokens: u64,
    /// (path, routing key, prompt length, body) per request.
    requests: Vec<(String, Option<String>, usize, Value)>,
}

struct Stub {
    url: String,
    seen: Arc<Mutex<Seen>>,
    /// One permit per request received (before answering, or hanging).
    arrived: Arc<tokio::sync::Semaphore>,
}

async fn stub(mode: Mode, worker_header: Option<&'static str>) -> Stub {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let arrived = Arc::new(tokio::sync::Semaphore::new(0));
    let state = seen.clone();
    let arrivals = arrived.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let state = state.clone();
            let arrivals = arrivals.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    arrivals.add_permits(1);
                    handle(req, mode, worker_header, state.clone())
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    Stub { url, seen, arrived }
}

type Body = BoxBody<Bytes, Infallible>;

async fn handle(
    req: Request<hyper::body::Incoming>,
    mode: Mode,
    worker_header: Option<&'static str>,
    seen: Arc<Mutex<Seen>>,
) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_string();
    let key = req
        .headers()
        .get("x-smg-routing-key")
        .map(|v| v.to_str().unwrap().to_string());
    let body: Value =
        serde_json::from_slice(&req.into_body().collect().await.unwrap().to_bytes()).unwrap();
    if mode == Mode::Hang {
        std::future::pending::<()>().await;
    }
    if mode == Mode::Reject {
        let resp = Response::builder()
            .status(400)
            .body(Full::new(Bytes::from(r#"{"error":{"message":"bad request"}}"#)).boxed())
            .unwrap();
        return Ok(resp);
    }
    let ids: Vec<u64> = body["input_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let chat = path == "/v1/chat/completions";
    let max_new = if chat {
        body["max_tokens"].as_u64()
    } else {
        body["sampling_params"]["max_new_tokens"].as_u64()
    }
    .unwrap();
    let stream = body["stream"].as_bool().unwrap();
    let prompt = ids.len() as u64;
    let cached = {
        let mut s = seen.lock();
        let cached = if s.prompts.contains(&ids) {
            (prompt - 1) / 16 * 16
        } else {
            0
        };
        s.prompts.insert(ids.clone());
        s.prompt_tokens += prompt;
        s.cached_tokens += cached;
        s.requests
            .push((path.clone(), key, ids.len(), body.clone()));
        cached
    };
    let out: Vec<u64> = (1..=max_new).collect();
    let meta = |n: usize, done: bool| {
        json!({"id":"r","prompt_tokens":prompt,"cached_tokens":cached,"completion_tokens":n,
               "finish_reason": if done { json!({"type":"length","length":n}) } else { Value::Null },
               "output_token_logprobs": out[..n].iter().map(|t| json!([-0.5, t, null])).collect::<Vec<_>>()})
    };
    let mut builder = Response::builder();
    if let Some(w) = worker_header {
        builder = builder.header("x-kvrouter-worker", w);
    }
    if !stream {
        let body = if chat {
            json!({"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"x"},
                   "finish_reason":"length","meta_info":meta(out.len(), true)}],
                   "usage":{"prompt_tokens":prompt,"completion_tokens":out.len()}})
        } else {
            json!({"text":"x","output_ids":out,"meta_info":meta(out.len(), true)})
        };
        return Ok(builder
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())).boxed())
            .unwrap());
    }
    let mut chunks: Vec<String> = Vec::new();
    if chat {
        chunks.push(json!({"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}).to_string());
        chunks.push(json!({"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}).to_string());
        chunks.push(json!({"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":prompt,"completion_tokens":out.len(),"prompt_tokens_details":{"cached_tokens":cached}}}).to_string());
    } else {
        for n in 1..=out.len() {
            chunks.push(
                json!({"text":"x","output_ids":out[..n],"meta_info":meta(n, n == out.len())})
                    .to_string(),
            );
        }
    }
    chunks.push("[DONE]".into());
    // Split every event across two frames to exercise the SSE parser.
    let frames: Vec<Result<Frame<Bytes>, Infallible>> = chunks
        .iter()
        .flat_map(|c| {
            let event = format!("data: {c}\n\n");
            let (a, b) = event.split_at(event.len() / 2);
            [a.to_string(), b.to_string()]
        })
        .map(|s| Ok(Frame::data(Bytes::from(s))))
        .collect();
    Ok(builder
        .header("content-type", "text/event-stream")
        .body(StreamBody::new(futures::stream::iter(frames)).boxed())
        .unwrap())
}

fn grpo(urls: Vec<String>) -> LoadgenConfig {
    let mut cfg = LoadgenConfig::new(
        urls,
        Workload::Grpo(GrpoConfig {
            groups: 3,
            samples: 4,
            prompt_len: 100,
            system_prefix_len: 32,
            groups_in_flight: 1,
        }),
    );
    cfg.max_new_tokens = Some(5);
    cfg.max_duration_secs = 60.0;
    cfg
}

#[tokio::test]
async fn grpo_hit_rate_and_workers_agree_with_the_servers() {
    let (a, b) = (stub(Mode::Serve, None).await, stub(Mode::Serve, None).await);
    let (summary, records) = run_with_records(grpo(vec![a.url.clone(), b.url.clone()]))
        .await
        .unwrap();
    assert_eq!(summary.requests.ok, 12);
    assert_eq!(records.len(), 12);
    let (sa, sb) = (a.seen.lock(), b.seen.lock());
    assert_eq!(sa.requests.len() + sb.requests.len(), 12);
    // One group's 4 siblings alternate over 2 URLs: each stub sees each prompt twice.
    assert_eq!(
        summary.tokens.prompt_reported,
        sa.prompt_tokens + sb.prompt_tokens
    );
    assert_eq!(summary.tokens.cached, sa.cached_tokens + sb.cached_tokens);
    assert!(summary.tokens.cached > 0);
    let expected =
        (sa.cached_tokens + sb.cached_tokens) as f64 / (sa.prompt_tokens + sb.prompt_tokens) as f64;
    assert_eq!(summary.prefix_hit_rate, Some(expected));
    let workers: Vec<&str> = summary
        .per_worker
        .iter()
        .map(|w| w.worker.as_str())
        .collect();
    let host = |u: &str| format!("direct@{}", u.trim_start_matches("http://"));
    let mut want = vec![host(&a.url), host(&b.url)];
    want.sort();
    assert_eq!(workers, want);
    let wa = summary
        .per_worker
        .iter()
        .find(|w| w.worker == host(&a.url))
        .unwrap();
    assert_eq!(
        (wa.prompt_tokens, wa.cached_tokens),
        (sa.prompt_tokens, sa.cached_tokens)
    );
    // The bodies are miles' /generate bodies; siblings differ only by sampling_seed.
    let (path, key, len, body) = &sa.requests[0];
    assert_eq!((path.as_str(), key, *len), ("/generate", &None, 100));
    assert_eq!(body["return_logprob"], json!(true));
    assert_eq!(body["sampling_params"]["max_new_tokens"], json!(5));
    for r in &records {
        assert_eq!(r.completion_tokens, Some(5));
        assert_eq!(
            r.ttft_ms,
            Some(r.e2e_ms),
            "non-streaming TTFT is end-to-end"
        );
    }
    let table = summary.render_table();
    assert!(table.contains("prefix hit rate"), "{table}");
}

#[tokio::test]
async fn streamed_generate_reads_cumulative_chunks_and_the_worker_header() {
    let s = stub(Mode::Serve, Some("worker-7")).await;
    let mut cfg = grpo(vec![s.url.clone()]);
    cfg.stream = true;
    let (summary, records) = run_with_records(cfg).await.unwrap();
    assert_eq!(summary.requests.ok, 12, "{:?}", summary.errors);
    assert_eq!(summary.per_worker.len(), 1);
    assert_eq!(summary.per_worker[0].worker, "worker-7");
    let seen = s.seen.lock();
    assert_eq!(summary.tokens.cached, seen.cached_tokens);
    for r in &records {
        assert_eq!(r.completion_tokens, Some(5));
        assert_eq!(r.finish_reason.as_deref(), Some("length"));
        let ttft = r.ttft_ms.unwrap();
        assert!(ttft <= r.e2e_ms);
    }
}

#[tokio::test]
async fn agent_sessions_resend_their_context_with_the_routing_key() {
    let s = stub(Mode::Serve, None).await;
    let agent = AgentConfig {
        sessions: 3,
        turns: 3,
        system_prefix_len: 32,
        first_prompt_len: 16,
        tool_output_len: 8,
        tool_latency_ms: 0,
        think_time_ms: 0.0,
    };
    for stream in [false, true] {
        let mut cfg = LoadgenConfig::new(vec![s.url.clone()], Workload::Agent(agent.clone()));
        cfg.max_new_tokens = Some(4);
        cfg.stream = stream;
        let summary = kvrouter_sim::loadgen::run(cfg).await.unwrap();
        assert_eq!(summary.requests.ok, 9, "{:?}", summary.errors);
        assert_eq!(summary.endpoint, "chat");
    }
    let seen = s.seen.lock();
    let mut by_key: HashMap<String, Vec<usize>> = HashMap::new();
    for (path, key, len, body) in &seen.requests {
        assert_eq!(path, "/v1/chat/completions");
        by_key
            .entry(key.clone().expect("routing key"))
            .or_default()
            .push(*len);
        let streamed = body["stream"] == json!(true);
        assert_eq!(body.get("return_meta_info").is_some(), !streamed);
    }
    // Same seed twice: the same 3 sessions, each 6 turns (3 per run), lengths 48, 60, 72.
    assert_eq!(by_key.len(), 3);
    for lens in by_key.values() {
        assert_eq!(lens, &vec![48, 60, 72, 48, 60, 72]);
    }
    // Non-streamed turns carry the server's output ids (the stub answers 1..=4) after
    // the previous context; streamed chat has none, so stand-ins are used instead.
    for (_, _, len, body) in &seen.requests {
        let ids = &body["input_ids"];
        if *len == 60 {
            let after_first: Vec<u64> = (48..52).map(|i| ids[i].as_u64().unwrap()).collect();
            let streamed = body["stream"] == json!(true);
            assert_eq!(
                after_first == vec![1, 2, 3, 4],
                !streamed,
                "{after_first:?}"
            );
        }
    }
}

#[tokio::test]
async fn trace_replays_lengths_and_shared_blocks() {
    let s = stub(Mode::Serve, None).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("trace.jsonl");
    std::fs::write(
        &file,
        "{\"timestamp\":0,\"input_length\":40,\"output_length\":3,\"hash_ids\":[0,1,2]}\n\
         {\"timestamp\":10,\"input_length\":40,\"output_length\":9,\"hash_ids\":[0,1,2]}\n\
         {\"timestamp\":20,\"input_length\":20,\"output_length\":2,\"hash_ids\":[0,5]}\n\
         {\"timestamp\":30,\"input_length\":20,\"output_length\":2,\"hash_ids\":[7,8]}\n",
    )
    .unwrap();
    let mut cfg = LoadgenConfig::new(
        vec![s.url.clone()],
        Workload::Trace(TraceConfig {
            block_size: 16,
            time_scale: 0.5,
            max_requests: 3,
            ..TraceConfig::new(&file)
        }),
    );
    cfg.max_new_tokens = Some(4);
    let (summary, records) = run_with_records(cfg).await.unwrap();
    assert_eq!(summary.requests.ok, 3);
    let lens: Vec<u64> = records.iter().map(|r| r.prompt_len).collect();
    assert_eq!(lens, vec![40, 40, 20]);
    let outs: Vec<Option<u64>> = records.iter().map(|r| r.completion_tokens).collect();
    assert_eq!(
        outs,
        vec![Some(3), Some(4), Some(2)],
        "output_length capped by max_new_tokens"
    );
    assert_eq!(
        records[1].cached_tokens,
        Some(32),
        "identical hash ids -> identical prompt"
    );
    assert_eq!(
        records[2].scheduled_ms, 10.0,
        "timestamp 20 ms at time scale 0.5"
    );
}

#[tokio::test]
async fn failures_are_recorded_not_fatal() {
    let s = stub(Mode::Reject, None).await;
    let mut cfg = grpo(vec![s.url.clone()]);
    cfg.endpoint = Some(Endpoint::Chat);
    let (summary, records) = run_with_records(cfg).await.unwrap();
    assert_eq!((summary.requests.ok, summary.requests.failed), (0, 12));
    assert_eq!(records[0].http_status, Some(400));
    assert_eq!(summary.errors[0].message, "HTTP 400: bad request");
    assert_eq!(summary.prefix_hit_rate, None);

    // Nothing listening: transport errors.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let summary = kvrouter_sim::loadgen::run(grpo(vec![format!("http://127.0.0.1:{port}")]))
        .await
        .unwrap();
    assert_eq!(summary.requests.failed, 12);
    assert!(
        summary.errors[0].message.starts_with("transport"),
        "{:?}",
        summary.errors
    );
}

#[tokio::test]
async fn timeouts_fail_and_the_duration_bound_cancels() {
    let s = stub(Mode::Hang, None).await;
    let mut cfg = grpo(vec![s.url.clone()]);
    cfg.timeout_secs = 0.2;
    let summary = kvrouter_sim::loadgen::run(cfg).await.unwrap();
    assert_eq!(summary.requests.failed, 12);
    assert!(
        summary.errors[0].message.starts_with("timeout"),
        "{:?}",
        summary.errors
    );

    let mut cfg = grpo(vec![s.url.clone()]);
    cfg.max_duration_secs = 1.5;
    let (summary, records) = run_with_records(cfg).await.unwrap();
    // The first group (4 siblings) is in flight at the bound; nothing starts after it.
    assert_eq!(summary.requests.cancelled, 4);
    assert_eq!(records.len(), 4);
    assert!(records.iter().all(|r| r.status == RequestStatus::Cancelled));
}

#[tokio::test]
async fn bad_configs_are_rejected_before_sending() {
    let err = kvrouter_sim::loadgen::run(grpo(vec!["http://10.1.2.3:80".into()]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("loopback"), "{err}");
    let missing = LoadgenConfig::new(
        vec!["http://127.0.0.1:1".into()],
        Workload::Trace(TraceConfig::new("/nonexistent/trace.jsonl")),
    );
    let err = kvrouter_sim::loadgen::run(missing).await.unwrap_err();
    assert!(format!("{err:#}").contains("cannot open trace"), "{err:#}");
}

#[tokio::test]
async fn a_stop_request_cancels_what_is_in_flight() {
    let s = stub(Mode::Hang, None).await;
    let stop = CancellationToken::new();
    let run = tokio::spawn(run_until(grpo(vec![s.url.clone()]), stop.clone()));
    // The first group's 4 siblings reach the server, then the run is stopped.
    let _ = s.arrived.acquire_many(4).await.unwrap();
    stop.cancel();
    let (summary, records) = run.await.unwrap().unwrap();
    assert_eq!((summary.requests.total, summary.requests.cancelled), (4, 4));
    assert!(records
        .iter()
        .all(|r| r.error.as_deref() == Some("cancelled: run stopped")));
}

#[tokio::test]
async fn sigint_stops_the_binary_which_still_reports() {
    let s = stub(Mode::Hang, None).await;
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["--url", &s.url, "grpo", "--groups", "1", "--samples", "3"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let _ = s.arrived.acquire_many(3).await.unwrap();
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().await.unwrap();
    assert_eq!(out.status.code(), Some(3), "no request succeeded");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("3 total, 0 ok, 0 failed, 3 cancelled"),
        "{stdout}"
    );
}
