//! Raw HTTP/1.1 calls over loopback, one connection each with `Connection: close`: the request
//! written by hand on a `std` TCP stream, the response read until the server closes it, its
//! status parsed and a chunked body decoded. The request and response halves are shared with
//! the async client of an in-process mock (`inproc::http`).

use std::io::{Read, Write};
use std::net::TcpStream;

use serde_json::Value;

/// The bytes of one request to `addr` with a JSON `body` (empty when `None`).
pub fn request(addr: &str, method: &str, path: &str, body: Option<&Value>) -> String {
    let payload = body.map(Value::to_string).unwrap_or_default();
    format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{payload}",
        payload.len()
    )
}

/// (status, body) of a whole response as read to the close; a chunked body is decoded.
pub fn response(raw: &str) -> (u16, String) {
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    (status, body)
}

/// The data of a chunked body (up to its last, empty chunk).
pub fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

/// One blocking exchange with `addr` (`HOST:PORT`); (status, body text).
pub fn http(addr: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(request(addr, method, path, body).as_bytes())
        .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    response(&raw)
}

/// A blocking `GET`; (status, body text).
pub fn get(addr: &str, path: &str) -> (u16, String) {
    http(addr, "GET", path, None)
}
