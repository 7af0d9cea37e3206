//! Resource limits of the router's HTTP server (docs/router.md, "Limits"): a client that
//! never finishes its headers or stops sending its body is cut off, at `--max-connections` a
//! new connection closes a silent or idle one (never a busy one) and probes are answered
//! beyond the limit, `--max-concurrent-requests` queues then answers 429
//! (408 after `--queue-timeout-secs` in the queue),
//! oversized bodies get 413, HTTP/2 streams per connection are capped, an HTTP/2 rapid-reset
//! flood does not stop service, and each trip is counted in `kvrouter_limit_trips_total`.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion
#![allow(clippy::disallowed_methods)] // fixtures spawn their own tasks; `Tasks` is the router's

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::http::{client, connect, metric, post_json, read_to_close, status_of, MUST_END};
use support::procs::*;
use support::stub::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn trips(router: &str, limit: &str) -> u64 {
    let key = format!("kvrouter_limit_trips_total{{limit=\"{limit}\"}}");
    metric(router, &key).await as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_that_never_ends_is_cut_after_the_header_read_timeout() {
    let r = start_router(&["--header-read-timeout-secs", "1"]);
    let mut s = connect(&r.url).await;
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
    let mut s = connect(&r.url).await;
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

/// A connection with a `/generate` in flight at `stub` (a `Behaviour::Hang` stub: it never
/// answers), returned once the request has reached the stub.
async fn request_in_flight(router: &str, stub: &Stub) -> TcpStream {
    let mut s = connect(router).await;
    s.write_all(
        b"POST /generate HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: 15\r\n\r\n{\"text\":\"hang\"}",
    )
    .await
    .unwrap();
    support::wait::wait_for("the request reaches the worker", || {
        let n = stub.received.lock().len();
        async move { n == 1 }
    })
    .await;
    s
}

/// One raw HTTP/1.1 request on `s`, read until the end of the response head and body of a
/// small answer (`Connection: close` asked, so the router closes after it).
async fn ask(s: &mut TcpStream, request: &str) -> String {
    s.write_all(request.as_bytes()).await.unwrap();
    String::from_utf8_lossy(&read_to_close(s).await).into_owned()
}

const HEALTH_CLOSE: &str = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

/// At `--max-connections`, a new connection closes the oldest one that has not sent a request
/// head (a slowloris) instead of waiting in the backlog behind it. (Both send nothing: one that
/// sent part of a head would go first whatever its age, but whether the router has read those
/// bytes before the newcomer arrives is a race; `table.rs` tests that order.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_max_connections_a_new_connection_closes_the_oldest_silent_one() {
    let r = start_router(&["--max-connections", "2"]);
    // Accepted in the order they connect (the listen backlog is FIFO).
    let mut silent_old = connect(&r.url).await;
    let mut silent_new = connect(&r.url).await;
    let mut good = connect(&r.url).await;
    let got = ask(&mut good, HEALTH_CLOSE).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(
        read_to_close(&mut silent_old).await.is_empty(),
        "the oldest silent one is closed"
    );
    let mut one = [0u8; 1];
    let still_open =
        tokio::time::timeout(Duration::from_millis(200), silent_new.read(&mut one)).await;
    assert!(still_open.is_err(), "the newer one keeps its slot");
    assert!(trips(&r.url, "max_connections").await >= 1);
    assert!(closed(&r.url, "evicted_fresh").await >= 1.0);
}

/// A keep-alive connection idle between requests gives its slot to a new connection; a busy
/// one (a request in flight) never does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_max_connections_the_idle_keep_alive_makes_room_and_the_busy_one_stays() {
    let stub = Stub::start(Behaviour::Hang).await;
    let r = router_with(&[&stub.url], &["--max-connections", "2"]).await;
    let mut busy = request_in_flight(&r.url, &stub).await;
    let mut idle = connect(&r.url).await;
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // Read to the end of the answer: the router has finished the request (idle from here).
    let answer = read_response(&mut idle).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("content-length: 2"),
        "a router-made answer keeps its length: {answer}"
    );
    let mut good = connect(&r.url).await;
    let got = ask(&mut good, HEALTH_CLOSE).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    read_to_close(&mut idle).await;
    let mut one = [0u8; 1];
    let still_open = tokio::time::timeout(Duration::from_millis(200), busy.read(&mut one)).await;
    assert!(still_open.is_err(), "the request in flight is not cut");
    assert!(closed(&r.url, "evicted_idle").await >= 1.0);
}

/// When every connection is busy, probes are still answered (a reserve beyond the limit) and a
/// data-plane request there gets a 503 naming the limit, not a wait in the kernel backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_connection_is_busy_probes_are_answered_and_requests_get_503() {
    let stub = Stub::start(Behaviour::Hang).await;
    let r = router_with(&[&stub.url], &["--max-connections", "1"]).await;
    let _busy = request_in_flight(&r.url, &stub).await;
    for probe in ["/health", "/readiness", "/metrics"] {
        let mut s = connect(&r.url).await;
        let got = ask(&mut s, &format!("GET {probe} HTTP/1.1\r\nHost: x\r\n\r\n")).await;
        assert!(got.starts_with("HTTP/1.1 200"), "{probe}: {got}");
        assert!(
            got.to_ascii_lowercase().contains("connection: close"),
            "{got}"
        );
    }
    let mut s = connect(&r.url).await;
    let got = ask(
        &mut s,
        "POST /generate HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: 12\r\n\r\n{\"text\":\"x\"}",
    )
    .await;
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    assert!(got.contains("connection_limit"), "{got}");
    assert_eq!(
        stub.received.lock().len(),
        1,
        "the refused one never reached a worker"
    );
}

/// A new connection that sends nothing is closed after `--request-head-timeout-secs`, however
/// long the keep-alive idle timeout (`--header-read-timeout-secs`) is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_new_connection_is_closed_at_the_request_head_timeout() {
    let r = start_router(&["--request-head-timeout-secs", "0.5"]);
    let mut s = connect(&r.url).await;
    assert!(read_to_close(&mut s).await.is_empty());
    assert!(trips(&r.url, "request_head_timeout").await >= 1);
    assert!(closed(&r.url, "request_head_timeout").await >= 1.0);
}

/// Reads one `content-length` response from a kept-alive connection.
async fn read_response(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = tokio::time::timeout(MUST_END, s.read(&mut buf))
            .await
            .expect("answered")
            .unwrap();
        assert!(n > 0, "closed before the answer ended");
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length: usize = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return text;
            }
        }
    }
}

async fn closed(router: &str, reason: &str) -> f64 {
    metric(
        router,
        &format!("kvrouter_connections_closed_total{{reason=\"{reason}\"}}"),
    )
    .await
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
        status_of(client().get(format!("{}/health", r.url))).await,
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
    let queued = post_json(&client(), &url, &json!({"text": "second"})).await;
    assert_eq!(queued.status(), 408);
    let body: serde_json::Value = queued.json().await.unwrap();
    assert_eq!(body["error"]["code"], "queue_timeout", "{body}");
    assert_eq!(body["error"]["type"], "Request Timeout", "{body}");
    assert_eq!(stub.received.lock().len(), 1, "the timed-out one never ran");
    assert!(trips(&r.url, "queue_timeout").await >= 1);
    first.abort();
}

/// An HTTP/2 (prior knowledge) connection to the router at `url`, driven by a spawned task:
/// the request sender and that task.
async fn h2<B>(
    url: &str,
) -> (
    hyper::client::conn::http2::SendRequest<B>,
    tokio::task::JoinHandle<hyper::Result<()>>,
)
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(connect(url).await),
    )
    .await
    .unwrap();
    (send, tokio::spawn(conn))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_rapid_reset_flood_does_not_stop_service() {
    let r = start_router(&[]);
    let (mut send, conn) = h2::<http_body_util::Empty<bytes::Bytes>>(&r.url).await;
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
        status_of(client().get(format!("{}/health", r.url))).await,
        200
    );
    let (mut send, _) = h2::<http_body_util::Empty<bytes::Bytes>>(&r.url).await;
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
    let (send, _) = h2::<http_body_util::Full<bytes::Bytes>>(&r.url).await;
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
        status_of(client().get(format!("{}/health", r.url))).await,
        200
    );
    assert_eq!(stub.received.lock().len(), 2, "the third stream waits");
    for c in calls {
        c.abort();
    }
}
