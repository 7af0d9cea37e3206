//! Header policy between client, router and worker (docs/router.md "Headers"):
//!
//! - Hop-by-hop headers (RFC 9110 §7.6.1: `Connection`, the headers it names, `Keep-Alive`,
//!   `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`,
//!   `Proxy-Authorization`) are removed in both directions.
//! - Requests: only an allow-list of client headers reaches the workers ([`HeaderPolicy`]):
//!   the body's `Content-Type`/`Content-Length`, `Accept`, request ids, W3C trace context,
//!   the routing key and SGLang's `x-sglext-*` response-format switches. Everything else
//!   (`Cookie`, `Authorization`, SGLang's `x-override-*` and `x-data-parallel-rank`, which
//!   would let a client rewrite its rid or the router's DP-rank choice) is dropped unless
//!   `--forward-request-header` names it. The worker's own credentials are added later
//!   (`Target::authorize`).
//! - The client's address is appended to `X-Forwarded-For` and `Forwarded` (RFC 7239), and
//!   `X-Forwarded-Proto: http` is set when no proxy in front set it.

use std::net::{IpAddr, SocketAddr};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// The routing key header (sgl-router compatible).
pub(crate) const ROUTING_KEY: &str = "x-smg-routing-key";
/// The header naming the worker that served a response.
pub(crate) const WORKER_HEADER: HeaderName = HeaderName::from_static("x-kvrouter-worker");

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Client headers forwarded to workers by default (exact names).
pub(crate) const DEFAULT_FORWARDED: &[&str] = &[
    "content-type",
    "content-length",
    "accept",
    "x-request-id",
    "x-correlation-id",
    "traceparent",
    "tracestate",
    "baggage",
    ROUTING_KEY,
];
/// Client header prefixes forwarded to workers by default.
pub(crate) const DEFAULT_FORWARDED_PREFIXES: &[&str] = &["x-request-id-", "x-sglext-"];

/// The address of the client a request came from, put in the request's extensions by the
/// server's accept loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientAddr(pub SocketAddr);

/// Which client headers reach the workers: the defaults plus `--forward-request-header`
/// names (`name`, `prefix*`, or `*` for every end-to-end header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderPolicy {
    names: Vec<String>,
    prefixes: Vec<String>,
    all: bool,
}

impl Default for HeaderPolicy {
    fn default() -> Self {
        HeaderPolicy::with_extra(&[]).unwrap_or(HeaderPolicy {
            names: Vec::new(),
            prefixes: Vec::new(),
            all: false,
        })
    }
}

impl HeaderPolicy {
    /// The defaults plus `extra` (each a header name, `prefix*` or `*`); the error names the
    /// entry that is not a valid header name.
    pub fn with_extra(extra: &[String]) -> Result<HeaderPolicy, String> {
        let mut p = HeaderPolicy {
            names: DEFAULT_FORWARDED.iter().map(|s| s.to_string()).collect(),
            prefixes: DEFAULT_FORWARDED_PREFIXES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            all: false,
        };
        for raw in extra {
            let e = raw.trim().to_ascii_lowercase();
            if e == "*" {
                p.all = true;
                continue;
            }
            let (name, prefix) = match e.strip_suffix('*') {
                Some(n) => (n, true),
                None => (e.as_str(), false),
            };
            if name.is_empty() || HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(format!("{raw:?} is not a header name (or prefix*)"));
            }
            if prefix {
                p.prefixes.push(name.to_string());
            } else {
                p.names.push(name.to_string());
            }
        }
        Ok(p)
    }

    /// Whether a client header called `name` goes to the workers.
    pub fn forwards(&self, name: &HeaderName) -> bool {
        let n = name.as_str();
        self.all
            || self.names.iter().any(|x| x == n)
            || self.prefixes.iter().any(|p| n.starts_with(p.as_str()))
    }
}

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

/// The header names listed in `Connection:` (lowercased): hop-by-hop for this message.
fn connection_named(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect()
}

/// Copies request headers for the worker: all but hop-by-hop (and those `Connection` names),
/// `host` (set from the URL) and `expect` (the router has already read the whole body).
/// Applied to headers already filtered by [`for_worker`], it removes nothing more.
pub(crate) fn request_headers(from: &HeaderMap, to: &mut HeaderMap) {
    let named = connection_named(from);
    to.reserve(from.len());
    for (name, value) in from {
        if !is_hop_by_hop(name)
            && !named.contains(name)
            && name != header::HOST
            && name != header::EXPECT
        {
            to.append(name.clone(), value.clone());
        }
    }
}

/// The headers a client's request carries to the workers: the end-to-end headers `policy`
/// forwards (never hop-by-hop, `Host`, `Expect`), then `X-Forwarded-For` and `Forwarded`
/// with the client's address appended and `X-Forwarded-Proto` set when absent.
pub(crate) fn for_worker(
    from: &HeaderMap,
    client: Option<ClientAddr>,
    policy: &HeaderPolicy,
) -> HeaderMap {
    let named = connection_named(from);
    let mut to = HeaderMap::with_capacity(from.len() + 3);
    for (name, value) in from {
        let forwarding =
            name == X_FORWARDED_FOR || name == X_FORWARDED_PROTO || name == header::FORWARDED;
        if is_hop_by_hop(name)
            || named.contains(name)
            || name == header::HOST
            || name == header::EXPECT
            || !(forwarding || policy.forwards(name))
        {
            continue;
        }
        to.append(name.clone(), value.clone());
    }
    if let Some(ClientAddr(addr)) = client {
        append_forwarded(&mut to, addr.ip());
    }
    if !to.contains_key(X_FORWARDED_PROTO) {
        to.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
    }
    to
}

/// Appends `ip` to `X-Forwarded-For` (`a, b, ip`) and `for=ip;proto=http` to `Forwarded`
/// (IPv6 quoted and bracketed as RFC 7239 §6 wants), each as one combined field.
fn append_forwarded(to: &mut HeaderMap, ip: IpAddr) {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    let node = match ip {
        IpAddr::V4(v4) => format!("for={v4};proto=http"),
        IpAddr::V6(v6) => format!("for=\"[{v6}]\";proto=http"),
    };
    for (name, item, sep) in [
        (X_FORWARDED_FOR, ip.to_string(), ", "),
        (header::FORWARDED, node, ", "),
    ] {
        let before: Vec<String> = to
            .get_all(&name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        let mut combined = before.join(sep);
        if !combined.is_empty() {
            combined.push_str(sep);
        }
        combined.push_str(&item);
        if let Ok(v) = HeaderValue::from_str(&combined) {
            to.insert(name, v);
        }
    }
}

/// Removes hop-by-hop headers (and those the worker's `Connection` names) from a worker
/// response before it is relayed.
pub(crate) fn strip_response_headers(headers: &mut HeaderMap) {
    let mut hop: Vec<HeaderName> = headers
        .keys()
        .filter(|n| is_hop_by_hop(n))
        .cloned()
        .collect();
    hop.extend(connection_named(headers));
    for name in hop {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(HeaderName::from_static(k), v.parse().unwrap());
        }
        h
    }

    fn names(h: &HeaderMap) -> Vec<&str> {
        let mut n: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        n.sort();
        n
    }

    #[test]
    fn filters_hop_by_hop_host_and_expect() {
        let from = map(&[
            ("host", "router:1"),
            ("connection", "keep-alive"),
            ("transfer-encoding", "chunked"),
            ("expect", "100-continue"),
            ("authorization", "Bearer k"),
            ("x-smg-routing-key", "s1"),
            ("content-type", "application/json"),
        ]);
        let mut to = HeaderMap::new();
        request_headers(&from, &mut to);
        assert_eq!(
            names(&to),
            vec!["authorization", "content-type", "x-smg-routing-key"]
        );
        let mut resp = from.clone();
        strip_response_headers(&mut resp);
        assert!(!resp.contains_key("connection") && !resp.contains_key("transfer-encoding"));
        assert!(resp.contains_key("host") && resp.contains_key("content-type"));
    }

    /// Issue 25 finding 6: headers named in `Connection:` were forwarded both ways.
    #[test]
    fn headers_named_in_connection_are_hop_by_hop_both_ways() {
        let from = map(&[
            ("connection", "close, X-Secret-Hop"),
            ("connection", "x-other"),
            ("x-secret-hop", "1"),
            ("x-other", "2"),
            ("x-request-id", "r1"),
        ]);
        let mut to = HeaderMap::new();
        request_headers(&from, &mut to);
        assert_eq!(names(&to), vec!["x-request-id"]);
        let policy = HeaderPolicy::with_extra(&["*".to_string()]).unwrap();
        let to = for_worker(&from, None, &policy);
        assert!(!to.contains_key("x-secret-hop") && !to.contains_key("x-other"));

        let mut resp = map(&[
            ("connection", "x-worker-hop"),
            ("x-worker-hop", "1"),
            ("content-type", "application/json"),
        ]);
        strip_response_headers(&mut resp);
        assert_eq!(names(&resp), vec!["content-type"]);
    }

    /// Issue 25 finding 6: `X-Forwarded-For` passed unchanged; every client header reached
    /// the workers (Cookie, Authorization, SGLang's `x-override-rid`).
    #[test]
    fn only_allowed_client_headers_reach_the_worker_with_the_client_address() {
        let from = map(&[
            ("cookie", "session=abc"),
            ("authorization", "Bearer router-key"),
            ("x-override-rid", "victim-1"),
            ("x-data-parallel-rank", "3"),
            ("user-agent", "curl"),
            ("content-type", "application/json"),
            ("accept", "text/event-stream"),
            ("x-request-id", "r1"),
            ("x-request-id-extra", "r2"),
            ("traceparent", "00-abc-def-01"),
            ("x-smg-routing-key", "k"),
            ("x-sglext-return-input-ids", "1"),
            ("x-forwarded-for", "203.0.113.7"),
        ]);
        let client = Some(ClientAddr("198.51.100.2:5555".parse().unwrap()));
        let to = for_worker(&from, client, &HeaderPolicy::default());
        assert_eq!(
            names(&to),
            vec![
                "accept",
                "content-type",
                "forwarded",
                "traceparent",
                "x-forwarded-for",
                "x-forwarded-proto",
                "x-request-id",
                "x-request-id-extra",
                "x-sglext-return-input-ids",
                "x-smg-routing-key",
            ]
        );
        assert_eq!(to["x-forwarded-for"], "203.0.113.7, 198.51.100.2");
        assert_eq!(to["forwarded"], "for=198.51.100.2;proto=http");
        assert_eq!(to["x-forwarded-proto"], "http");

        let extra = ["Authorization".to_string(), "x-tenant-*".to_string()];
        let policy = HeaderPolicy::with_extra(&extra).unwrap();
        let from = map(&[("authorization", "Bearer k"), ("x-tenant-id", "t")]);
        let to = for_worker(&from, None, &policy);
        assert!(to.contains_key("authorization") && to.contains_key("x-tenant-id"));
        assert!(HeaderPolicy::with_extra(&["bad header".to_string()]).is_err());
    }

    #[test]
    fn forwarded_chains_and_ipv6() {
        let from = map(&[
            ("x-forwarded-for", "10.0.0.1"),
            ("x-forwarded-for", "10.0.0.2"),
            ("forwarded", "for=10.0.0.1"),
            ("x-forwarded-proto", "https"),
        ]);
        let client = Some(ClientAddr("[2001:db8::1]:80".parse().unwrap()));
        let to = for_worker(&from, client, &HeaderPolicy::default());
        assert_eq!(to["x-forwarded-for"], "10.0.0.1, 10.0.0.2, 2001:db8::1");
        assert_eq!(
            to["forwarded"],
            "for=10.0.0.1, for=\"[2001:db8::1]\";proto=http"
        );
        assert_eq!(
            to["x-forwarded-proto"], "https",
            "a front proxy's value is kept"
        );
        let mapped = Some(ClientAddr("[::ffff:127.0.0.1]:80".parse().unwrap()));
        let to = for_worker(&HeaderMap::new(), mapped, &HeaderPolicy::default());
        assert_eq!(to["x-forwarded-for"], "127.0.0.1");
    }
}
