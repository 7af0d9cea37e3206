//! An `sglang-mock` started in this process on an ephemeral port (page 4, `--speedup 0` unless
//! given), and raw HTTP/1 calls to it over loopback (one connection each, `Connection: close`;
//! the request and response as `raw` writes and reads them).

use clap::Parser;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use kvrouter_sim::mock::{start, MockArgs};

use super::raw;

/// Starts a mock with `extra` flags; its `host:port`.
pub async fn mock(extra: &[&str]) -> String {
    let mut argv = vec!["sglang-mock", "--port", "0", "--page-size", "4"];
    if !extra.contains(&"--speedup") {
        argv.extend(["--speedup", "0"]);
    }
    argv.extend_from_slice(extra);
    let m = start(MockArgs::parse_from(argv)).await.unwrap();
    m.url.trim_start_matches("http://").to_string()
}

/// Sends one request (`raw::request`) and returns the connection unread (a client that
/// may go away before the answer).
pub async fn send(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> tokio::net::TcpStream {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(raw::request(addr, method, path, body).as_bytes())
        .await
        .unwrap();
    s
}

/// One request (`raw::request`); (status, body text, a chunked body decoded).
pub async fn http(addr: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
    let mut s = send(addr, method, path, body).await;
    let mut got = String::new();
    s.read_to_string(&mut got).await.unwrap();
    raw::response(&got)
}

/// A JSON POST; (status, body as JSON, or as a string when it is not JSON).
pub async fn post(addr: &str, path: &str, body: Value) -> (u16, Value) {
    let (st, b) = http(addr, "POST", path, Some(&body)).await;
    (st, serde_json::from_str(&b).unwrap_or(Value::String(b)))
}
