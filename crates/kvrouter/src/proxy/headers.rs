//! Header filtering between client, router and worker: hop-by-hop headers are not forwarded,
//! everything else passes unchanged in both directions.

use http::header::{self, HeaderMap, HeaderName};

/// The routing key header (sgl-router compatible).
pub const ROUTING_KEY: &str = "x-smg-routing-key";
/// The header naming the worker that served a response.
pub const WORKER_HEADER: HeaderName = HeaderName::from_static("x-kvrouter-worker");

fn is_hop_by_hop(name: &HeaderName) -> bool {
    name == header::CONNECTION
        || name == header::TRANSFER_ENCODING
        || name == header::UPGRADE
        || name == header::TE
        || name == header::TRAILER
        || name == header::PROXY_AUTHORIZATION
        || name.as_str() == "keep-alive"
        || name.as_str() == "proxy-connection"
}

/// Copies request headers for the worker: all but hop-by-hop, `host` (set from the URL) and
/// `expect` (the router has already read the whole body).
pub fn request_headers(from: &HeaderMap, to: &mut HeaderMap) {
    to.reserve(from.len());
    for (name, value) in from {
        if !is_hop_by_hop(name) && name != header::HOST && name != header::EXPECT {
            to.append(name.clone(), value.clone());
        }
    }
}

/// Removes hop-by-hop headers from a worker response before it is relayed.
pub fn strip_response_headers(headers: &mut HeaderMap) {
    let hop: Vec<HeaderName> = headers
        .keys()
        .filter(|n| is_hop_by_hop(n))
        .cloned()
        .collect();
    for name in hop {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_hop_by_hop_host_and_expect() {
        let mut from = HeaderMap::new();
        for (k, v) in [
            ("host", "router:1"),
            ("connection", "keep-alive"),
            ("transfer-encoding", "chunked"),
            ("expect", "100-continue"),
            ("authorization", "Bearer k"),
            ("x-smg-routing-key", "s1"),
            ("content-type", "application/json"),
        ] {
            from.append(HeaderName::from_static(k), v.parse().unwrap());
        }
        let mut to = HeaderMap::new();
        request_headers(&from, &mut to);
        let mut names: Vec<&str> = to.keys().map(|k| k.as_str()).collect();
        names.sort();
        assert_eq!(
            names,
            vec!["authorization", "content-type", "x-smg-routing-key"]
        );
        let mut resp = from.clone();
        strip_response_headers(&mut resp);
        assert!(!resp.contains_key("connection") && !resp.contains_key("transfer-encoding"));
        assert!(resp.contains_key("host") && resp.contains_key("content-type"));
    }
}
