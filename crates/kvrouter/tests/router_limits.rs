//! Resource limits of the router's HTTP server (docs/router.md, "Limits"): a client that
//! never finishes its headers or stops sending its body is cut off, connections beyond
//! `--max-connections` wait in the backlog, `--max-concurrent-requests` queues then answers 429
//! (408 after `--queue-timeout-secs` in the queue),
//! oversized bodies get 413, HTTP/2 streams per connection are capped, an HTTP/2 rapid-reset
//! flood does not stop service, and each trip is counted in `kvrouter_limit_trips_total`.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

mod support;

use std::time::Duration;

use serde_json::json;
use support::http::{client, read_to_close, MUST_END};
use support::procs::*;
use support::stub::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn addr(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

async fn trips(router: &str, limit: &str) -> u64 {
    let text = support::http::get_text(&client(), &format!("{router}/metrics")).await;
    let key = format!("kvrouter_limit_trips_total{{limit=\"{limit}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_that_never_ends_is_cut_after_the_header_read_timeout() {
    let r = start_router(&["--header-read-timeout-secs", "1"]);
    let mut s = TcpStream::connect(addr(&r.url)).await.unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let got = read_to_close(&mut s).await;
    assert!(
        !String::from_utf8_lossy(&got).contains("200 OK"),
        "no answer to an unfinished head"
    );
    assert!(trips(&r.url, "header_read_timeout").await >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_upload_gets_408_and_its_connection_closed() {
    let r = start_router(&["--body-read-timeout-secs", "1"]);
    let mut s = TcpStream::connect(addr(&r.url)).await.unwrap();
    s.write_all(
        b"POST /generate HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: 1048576\r\n\r\n{\"text\":\"",
    )
    .await
    .unwrap();
    s.write_all(&[b'a'; 4096]).await.unwrap();
    let got = String::from_utf8_lossy(&read_to_close(&mut s).await).into_owned();
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains("body_read_timeout"), "{got}");
    assert!(trips(&r.url, "body_read_timeout").await >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_max_payload_size_gets_413() {
    let r = start_router(&["--max-payload-size", "1000"]);
    let resp = client()
        .post(format!("{}/generate", r.url))
        .body(vec![b' '; 2000])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    assert!(trips(&r.url, "max_payload_size").await >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_max_connections_wait_for_a_free_slot() {
    let r = start_router(&["--max-connections", "2"]);
    let a = TcpStream::connect(addr(&r.url)).await.unwrap();
    let b = TcpStream::connect(addr(&r.url)).await.unwrap();
    // Both slots taken by idle connections: a third one is left in the backlog, unanswered.
    let mut c = TcpStream::connect(addr(&r.url)).await.unwrap();
    c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(500), c.read(&mut first)).await;
    assert!(early.is_err(), "answered while both slots were taken");
    drop(a);
    let mut got = first[..0].to_vec();
    got.extend(read_to_close(&mut c).await);
    let got = String::from_utf8_lossy(&got).into_owned();
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    drop(b);
    assert!(trips(&r.url, "max_connections").await >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrent_requests_queues_then_answers_429() {
    let stub = Stub::start(Behaviour::Hang).await;
    let r = router_with(
        &[&stub.url],
        &["--max-concurrent-requests", "1", "--queue-size", "1"],
    )
    .await;
    let send = |text: &'static str| {
        let url = format!("{}/generate", r.url);
        tokio::spawn(async move { client().post(url).json(&json!({"text": text})).send().await })
    };
    // The first takes the one slot (the stub never answers).
    let first = send("first");
    support::wait::wait_for("the first request reaches the worker", || {
        let n = stub.received.lock().len();
        async move { n == 1 }
    })
    .await;
    // Of the next two, one waits in the queue and the other is refused at once.
    let (mut second, mut third) = (send("second"), send("third"));
    let refused = tokio::select! {
        r = &mut second => r,
        r = &mut third => r,
    };
    let refused = refused.unwrap().unwrap();
    assert_eq!(refused.status(), 429);
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_requests", "{body}");
    assert!(
        !second.is_finished() || !third.is_finished(),
        "one is queued"
    );
    assert_eq!(stub.received.lock().len(), 1, "the queued one waits");
    // Health and metrics are outside the limit.
    assert_eq!(
        client()
            .get(format!("{}/health", r.url))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert!(trips(&r.url, "max_concurrent_requests").await >= 1);
    first.abort();
    second.abort();
    third.abort();
}

/// A request that waits in the queue longer than `--queue-timeout-secs` gets 408 (sgl-router's
/// status) and never reaches the worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_queued_beyond_queue_timeout_gets_408() {
    let stub = Stub::start(Behaviour::Hang).await;
    let r = router_with(
        &[&stub.url],
        &[
            "--max-concurrent-requests",
            "1",
            "--queue-size",
            "4",
            "--queue-timeout-secs",
            "0.2",
        ],
    )
    .await;
    let url = format!("{}/generate", r.url);
    let u = url.clone();
    let first = tokio::spawn(async move {
        client()
            .post(u)
            .json(&json!({"text": "first"}))
            .send()
            .await
    });
    support::wait::wait_for("the first request reaches the worker", || {
        let n = stub.received.lock().len();
        async move { n == 1 }
    })
    .await;
    let queued = client()
        .post(&url)
        .json(&json!({"text": "second"}))
        .send()
        .await
        .unwrap();
    assert_eq!(queued.status(), 408);
    let body: serde_json::Value = queued.json().await.unwrap();
    assert_eq!(body["error"]["code"], "queue_timeout", "{body}");
    assert_eq!(body["error"]["type"], "Request Timeout", "{body}");
    assert_eq!(stub.received.lock().len(), 1, "the timed-out one never ran");
    assert!(trips(&r.url, "queue_timeout").await >= 1);
    first.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_rapid_reset_flood_does_not_stop_service() {
    let r = start_router(&[]);
    let stream = TcpStream::connect(addr(&r.url)).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake::<_, _, http_body_util::Empty<bytes::Bytes>>(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    // Open and cancel (RST_STREAM) streams as fast as possible.
    for _ in 0..5000 {
        if send.ready().await.is_err() {
            break; // the router closed the abusive connection: fine
        }
        let req = http::Request::get(format!("{}/health", r.url))
            .body(http_body_util::Empty::new())
            .unwrap();
        let fut = send.send_request(req);
        drop(fut);
    }
    drop(send);
    let _ = tokio::time::timeout(MUST_END, conn).await;
    // Everyone else is still served, over HTTP/1 and HTTP/2.
    assert_eq!(
        client()
            .get(format!("{}/health", r.url))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let stream = TcpStream::connect(addr(&r.url)).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake::<_, _, http_body_util::Empty<bytes::Bytes>>(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get(format!("{}/health", r.url))
        .body(http_body_util::Empty::new())
        .unwrap();
    let resp = tokio::time::timeout(MUST_END, send.send_request(req))
        .await
        .expect("answered")
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_per_connection_are_capped() {
    let stub = Stub::start(Behaviour::Hang).await;
    let r = router_with(&[&stub.url], &["--http2-max-concurrent-streams", "2"]).await;
    let stream = TcpStream::connect(addr(&r.url)).await.unwrap();
    let (send, conn) =
        hyper::client::conn::http2::handshake::<_, _, http_body_util::Full<bytes::Bytes>>(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .unwrap();
    tokio::spawn(conn);
    // Three requests on one connection to a worker that never answers: the router's
    // SETTINGS_MAX_CONCURRENT_STREAMS lets only two streams open, the third waits.
    let mut calls = Vec::new();
    for i in 0..3 {
        let mut send = send.clone();
        let uri = format!("{}/generate", r.url);
        calls.push(tokio::spawn(async move {
            let req = http::Request::post(uri)
                .header("content-type", "application/json")
                .body(http_body_util::Full::new(bytes::Bytes::from(format!(
                    "{{\"text\":\"call {i}\"}}"
                ))))
                .unwrap();
            let _ = send.send_request(req).await;
        }));
    }
    support::wait::wait_for("two streams reach the worker", || {
        let n = stub.received.lock().len();
        async move { n == 2 }
    })
    .await;
    // A fresh connection is still served while the first one is at its cap.
    assert_eq!(
        client()
            .get(format!("{}/health", r.url))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(stub.received.lock().len(), 2, "the third stream waits");
    for c in calls {
        c.abort();
    }
}
