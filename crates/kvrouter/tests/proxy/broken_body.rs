//! A worker that breaks its chunked, non-SSE response body mid-way: the client must see a
//! broken response (no clean chunked terminator, a transport error when reading the body),
//! never a 200 with a clean, silently truncated body. The worker here is a raw TCP server so
//! the break is exact: a few chunks, then the socket closes without the `0\r\n\r\n` end.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion
#![allow(clippy::disallowed_methods)] // fixtures spawn their own tasks; `Tasks` is the router's

use crate::support;

use serde_json::json;
use support::http::{client, post_json};
use support::procs::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The part of the body the worker sends before it breaks.
const PARTIAL: &str = "{\"text\":\"the beginning of a long answer";

fn answer(status: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Reads one request (head and `content-length` body) and returns its path; `None` at EOF.
async fn read_request(s: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap_or(0));
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.ok()?;
    head.split_whitespace().nth(1).map(str::to_string)
}

/// A worker answering SGLang's info routes, and `/generate` with a chunked body it breaks.
async fn breaking_worker() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                while let Some(path) = read_request(&mut s).await {
                    let reply = match path.as_str() {
                        "/health" => answer("200 OK", "{}"),
                        "/server_info" | "/get_server_info" => answer(
                            "200 OK",
                            &json!({"page_size": 16, "dp_size": 1}).to_string(),
                        ),
                        "/model_info" | "/get_model_info" => answer(
                            "200 OK",
                            &json!({"model_path": "m", "weight_version": "default"}).to_string(),
                        ),
                        "/generate" => {
                            let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                            let chunk = format!("{:x}\r\n{PARTIAL}\r\n", PARTIAL.len());
                            let _ = s.write_all(head.as_bytes()).await;
                            let _ = s.write_all(chunk.as_bytes()).await;
                            let _ = s.flush().await;
                            return; // dropped: the body breaks without its terminator
                        }
                        _ => answer("404 Not Found", "{}"),
                    };
                    if s.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_chunked_body_reaches_the_client_broken() {
    let worker = breaking_worker().await;
    let r = router_with(&[&worker], &["--retry-max-retries", "0"]).await;
    let resp = post_json(
        &client(),
        &format!("{}/generate", r.url),
        &json!({"text": "hi"}),
    )
    .await;
    assert_eq!(resp.status(), 200, "the head was already relayed");
    let body = resp.bytes().await;
    assert!(
        body.is_err(),
        "a clean end would hide the truncation; got {:?}",
        body.map(|b| String::from_utf8_lossy(&b).into_owned())
    );
    let metrics = support::http::get_text(&client(), &format!("{}/metrics", r.url)).await;
    assert!(
        metrics.contains("kind=\"stream_broken\""),
        "counted as a worker failure"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raw_response_has_no_chunked_terminator() {
    let worker = breaking_worker().await;
    let r = router_with(&[&worker], &["--retry-max-retries", "0"]).await;
    let mut s = TcpStream::connect(r.url.trim_start_matches("http://"))
        .await
        .unwrap();
    let body = json!({"text": "hi"}).to_string();
    let req = format!(
        "POST /generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(45), s.read_to_end(&mut got))
        .await
        .expect("the router closes the connection")
        .unwrap();
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.contains(PARTIAL), "the partial body is relayed: {got}");
    assert!(
        !got.ends_with("0\r\n\r\n"),
        "the router must not end the body cleanly: {got:?}"
    );
}
