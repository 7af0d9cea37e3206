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

/// GETs `{base}{path}`; returns the status and the JSON body (Null when not JSON).
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

/// The port at the end of a URL or a ZMQ endpoint (`...:PORT`); panics when there is none.
pub fn port_of(addr: &str) -> u16 {
    addr.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {addr}"))
}

/// A raw TCP connection to the server at `url` (`http://HOST:PORT`).
pub async fn connect(url: &str) -> tokio::net::TcpStream {
    let addr = url.trim_start_matches("http://");
    tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
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

/// The text of `GET {base}/metrics` (panics on a transport error).
pub async fn metrics(base: &str) -> String {
    get_text(&client(), &format!("{base}/metrics")).await
}

/// The value of `series` (a metric name with its labels, as exposed) in a Prometheus text
/// page; `None` when the page has no such line.
pub fn metric_value(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|l| {
        let v = l.strip_prefix(series)?.strip_prefix(' ')?;
        Some(v.trim().parse().unwrap_or_else(|e| panic!("{l}: {e}")))
    })
}

/// The value of `series` in `GET {base}/metrics` (see [`metric_value`]); 0 when absent.
pub async fn metric(base: &str, series: &str) -> f64 {
    metric_value(&metrics(base).await, series).unwrap_or(0.0)
}

/// Reads an SSE body into its `data:` payloads (the closing `[DONE]` included), checking
/// SGLang's framing: each event one `data: ` line, the stream ending with `data: [DONE]`.
pub fn sse_data(body: &str) -> Vec<String> {
    assert!(
        body.ends_with("data: [DONE]\n\n"),
        "stream ends with [DONE]: {body:?}"
    );
    body.split_terminator("\n\n")
        .map(|chunk| {
            chunk
                .strip_prefix("data: ")
                .unwrap_or_else(|| panic!("bad SSE chunk {chunk:?}"))
                .to_string()
        })
        .collect()
}

/// The JSON events of an SSE body framed as [`sse_data`] checks, in order, without the closing
/// `[DONE]`; panics on an event that is not JSON.
pub fn sse_events(body: &str) -> Vec<Value> {
    sse_data(body)
        .iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("SSE event {d}: {e}")))
        .collect()
}

/// Sends a built request and returns its status (panics on a transport error).
pub async fn status_of(req: reqwest::RequestBuilder) -> u16 {
    req.send().await.expect("request sent").status().as_u16()
}

/// GETs `url` and returns its body as JSON (panics on a transport error or a body that is
/// not JSON).
pub async fn get_json(c: &reqwest::Client, url: &str) -> Value {
    c.get(url)
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("JSON body")
}

/// POSTs JSON `body` to `url` with client `c`; the response (panics on a transport error).
pub async fn post_json(c: &reqwest::Client, url: &str, body: &Value) -> reqwest::Response {
    c.post(url)
        .json(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"))
}
