//! HTTP calls of the tests, all async on one `reqwest` client shape: JSON POST/GET
//! returning (status, body), and `/generate` with the router's serving-worker header.

use std::time::Duration;

use serde_json::Value;

/// A client without connection reuse (so killed/restarted servers are reached afresh)
/// and with a 60 s overall timeout.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client")
}

async fn status_and_json(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().await.expect("response body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// POSTs JSON `body` to `{base}{path}`; returns the status and the JSON body (Null when not JSON).
pub async fn post(base: &str, path: &str, body: Value) -> (u16, Value) {
    let url = format!("{base}{path}");
    let r = client()
        .post(&url)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    status_and_json(r).await
}

/// GETs `{base}{path}`; returns the status and the JSON body (Null when not JSON).
/// POSTs `body` as raw JSON bytes (kept byte for byte); (status, headers, body bytes).
pub async fn post_bytes(
    base: &str,
    path: &str,
    body: &str,
) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let url = format!("{base}{path}");
    let r = client()
        .post(&url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let bytes = r
        .bytes()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: reading the body: {e}"));
    (status, headers, bytes.to_vec())
}

pub async fn get(base: &str, path: &str) -> (u16, Value) {
    let url = format!("{base}{path}");
    let r = client()
        .get(&url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    status_and_json(r).await
}

/// `(running, waiting)` requests summed over an `sglang-mock`'s ranks (`GET /mock/state`).
pub async fn mock_load(mock: &str) -> (u64, u64) {
    let (_, state) = get(mock, "/mock/state").await;
    state["ranks"]
        .as_array()
        .expect("/mock/state has ranks")
        .iter()
        .fold((0, 0), |(running, waiting), r| {
            (
                running + r["running"].as_u64().expect("rank has running"),
                waiting + r["waiting"].as_u64().expect("rank has waiting"),
            )
        })
}

/// `POST {base}/generate` with `body`: (status, `x-kvrouter-worker` header, JSON body or Null).
pub async fn generate(
    c: &reqwest::Client,
    base: &str,
    body: &Value,
) -> (u16, Option<String>, Value) {
    let r = c
        .post(format!("{base}/generate"))
        .json(body)
        .send()
        .await
        .expect("generate");
    let status = r.status().as_u16();
    let worker = r
        .headers()
        .get("x-kvrouter-worker")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = r.json().await.unwrap_or(Value::Null);
    (status, worker, body)
}

/// GETs `url` and returns its body as text (panics on a transport error).
pub async fn get_text(c: &reqwest::Client, url: &str) -> String {
    c.get(url)
        .send()
        .await
        .expect("GET")
        .text()
        .await
        .expect("response body")
}

/// Safety net for reads that must end (a hang is the failure being tested, not a timing).
pub const MUST_END: Duration = Duration::from_secs(45);

/// Reads a raw connection until the peer closes it; panics if it does not within
/// [`MUST_END`].
pub async fn read_to_close(s: &mut tokio::net::TcpStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    tokio::time::timeout(MUST_END, async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("the peer closes the connection");
    got
}
