//! Worker URLs: the one definition of a valid worker URL and of its canonical form,
//! shared by the configuration (`--worker-urls`) and the registry (`POST /workers`,
//! lookups and removal by URL). Canonical: `http://host[:port][/path]`, host lowercased,
//! one spelling per socket (`localhost`, `0.0.0.0` and `[::ffff:127.0.0.1]` are
//! `127.0.0.1`, `[::]` is `[::1]`, a trailing dot is dropped; see `canonical_host`), the
//! default port (80) omitted, no trailing slash and no `user:password@` (credentials are
//! split off into a [`Credentials`] secret, so the URL can be shown in metrics, logs,
//! headers and JSON). Also the address policy: link-local addresses (judged on the IPv4
//! address an IPv6 spelling embeds) and, with `--worker-allow-cidr`, addresses outside
//! the allow-list are refused.

use std::net::IpAddr;

use ipnet::IpNet;

/// `user:password` taken from a worker URL; sent as `Authorization: Basic` to that
/// worker. Its `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl Credentials {
    /// The `Authorization` header value: `Basic base64(user:password)`.
    pub fn basic_authorization(&self) -> String {
        use base64::Engine as _;
        let raw = format!("{}:{}", self.username, self.password);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    }
}

/// A parsed worker URL: canonical credential-free `url`, its `host` (an IPv6 address
/// without brackets) and the credentials it carried, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkerAddress {
    pub url: String,
    pub host: String,
    pub credentials: Option<Credentials>,
}

/// Validates a worker URL and returns its canonical form with the host and the credentials
/// split off; the error is the reason (without the URL). Accepts `http://` URLs with a host
/// and no query or fragment.
pub(crate) fn parse_worker_url(raw: &str) -> Result<WorkerAddress, String> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Err("empty".to_string());
    }
    let mut parsed = url::Url::parse(trimmed).map_err(|e| e.to_string())?;
    if parsed.scheme() != "http" {
        return Err("only http:// workers are supported".to_string());
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err("a worker url has no query or fragment".to_string());
    }
    let host = parsed
        .host_str()
        .ok_or_else(|| "no host".to_string())?
        .trim_matches(|c| c == '[' || c == ']')
        .to_ascii_lowercase();
    let host = match canonical_host(&host) {
        Some(respelled) => {
            let bracketed = if respelled.contains(':') {
                format!("[{respelled}]")
            } else {
                respelled.clone()
            };
            parsed
                .set_host(Some(&bracketed))
                .map_err(|e| e.to_string())?;
            respelled
        }
        None => host,
    };
    let credentials = if parsed.username().is_empty() && parsed.password().is_none() {
        None
    } else {
        let c = Credentials {
            username: percent_decode(parsed.username()),
            password: percent_decode(parsed.password().unwrap_or("")),
        };
        let _ = parsed.set_username("");
        let _ = parsed.set_password(None);
        Some(c)
    };
    Ok(WorkerAddress {
        url: parsed.as_str().trim_end_matches('/').to_string(),
        host,
        credentials,
    })
}

/// Another spelling of `host` (lowercase, IPv6 without brackets) for the same socket, when it
/// has one: `localhost` (and `localhost.`) is `127.0.0.1`; the unspecified addresses, which
/// a connection reaches as loopback, are `127.0.0.1` and `::1`; an IPv4-mapped IPv6 literal
/// (`::ffff:127.0.0.1`, which a dual-stack socket connects to as `127.0.0.1`) is its IPv4
/// address; a fully qualified name's trailing dot (`host.example.`) is dropped.
fn canonical_host(host: &str) -> Option<String> {
    if let Ok(v6) = host.parse::<std::net::Ipv6Addr>() {
        if v6.is_unspecified() {
            return Some("::1".to_string());
        }
        return v6.to_ipv4_mapped().map(|v4| {
            if v4.is_unspecified() {
                "127.0.0.1".to_string()
            } else {
                v4.to_string()
            }
        });
    }
    if host == "0.0.0.0" {
        return Some("127.0.0.1".to_string());
    }
    let name = host.strip_suffix('.').filter(|n| !n.is_empty());
    match name.unwrap_or(host) {
        "localhost" => Some("127.0.0.1".to_string()),
        _ => name.map(str::to_string),
    }
}

/// Decodes `%XX` escapes of a URL's userinfo (invalid escapes are kept as written).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The admin API's form of [`parse_worker_url`]: `http://` is assumed when `raw`
/// names no scheme (`host:port`).
pub(crate) fn parse_worker_address(raw: &str) -> Result<WorkerAddress, String> {
    let trimmed = raw.trim();
    if trimmed.is_empty() || trimmed.contains("://") {
        parse_worker_url(trimmed)
    } else {
        parse_worker_url(&format!("http://{trimmed}"))
    }
}

/// Infallible lookup key for a URL a client gave: the canonical form of
/// [`parse_worker_address`], or the input trimmed (and without trailing slashes)
/// when it is not a valid worker URL.
pub(crate) fn worker_url_key(raw: &str) -> String {
    parse_worker_address(raw)
        .map(|a| a.url)
        .unwrap_or_else(|_| raw.trim().trim_end_matches('/').to_string())
}

/// Whether `ip` may be a worker: with an empty `allow` list every address but a
/// link-local one (169.254.0.0/16, fe80::/10: cloud metadata services live there);
/// with a list, exactly the addresses inside it.
///
/// The check is made on the address the connection reaches ([`effective_ip`]): an IPv6
/// spelling of an IPv4 address (`::ffff:169.254.169.254`, `::169.254.169.254`,
/// `64:ff9b::a9fe:a9fe`) is judged as that IPv4 address. The allow-list admits an address
/// when it contains either spelling.
pub(crate) fn check_worker_ip(ip: IpAddr, allow: &[IpNet]) -> Result<(), String> {
    let reached = effective_ip(ip);
    if !allow.is_empty() {
        if allow
            .iter()
            .any(|n| n.contains(&ip) || n.contains(&reached))
        {
            return Ok(());
        }
        return Err(format!("address {ip} is outside --worker-allow-cidr"));
    }
    let link_local = match reached {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    };
    if link_local {
        let shown = if reached == ip {
            ip.to_string()
        } else {
            format!("{ip} (= {reached})")
        };
        return Err(format!(
            "link-local address {shown} is refused (allow it with --worker-allow-cidr)"
        ));
    }
    Ok(())
}

/// The IPv4 address an IPv6 address stands for, when it embeds one: IPv4-mapped
/// (`::ffff:a.b.c.d`, which a dual-stack socket connects to as `a.b.c.d`), IPv4-compatible
/// (`::a.b.c.d`, deprecated by RFC 4291 but still parsed) and NAT64 (RFC 6052: the
/// well-known prefix `64:ff9b::/96` and the local-use `64:ff9b:1::/48`, both translated to
/// `a.b.c.d` by a NAT64 gateway). Any other address is returned as it is. IPv4 spellings
/// in hex, octal or as one decimal number never get here: the WHATWG URL parser already
/// turns `0xa9fea9fe`, `0251.0376.0251.0376` and `2852039166` into `169.254.169.254`.
pub(crate) fn effective_ip(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else { return ip };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let o = v6.octets();
    let s = v6.segments();
    // IPv4-compatible: 96 zero bits, then the IPv4 address (`::` and `::1` excluded).
    if s[..6].iter().all(|&x| x == 0) && (s[6] != 0 || s[7] > 1) {
        return IpAddr::V4(std::net::Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    // NAT64 well-known prefix 64:ff9b::/96: the last 32 bits.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return IpAddr::V4(std::net::Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    // NAT64 local-use prefix 64:ff9b:1::/48 (RFC 8215), RFC 6052 /48 layout: IPv4 octets
    // 6..8, the `u` octet 8 (zero), IPv4 octets 9..11.
    if s[..3] == [0x64, 0xff9b, 1] {
        return IpAddr::V4(std::net::Ipv4Addr::new(o[6], o[7], o[9], o[10]));
    }
    ip
}

/// [`check_worker_ip`] for a host that is an IP literal; a hostname passes here (it
/// is resolved and checked by [`check_worker_host`] when an allow-list is set).
pub(crate) fn check_worker_literal(host: &str, allow: &[IpNet]) -> Result<(), String> {
    match host.parse::<IpAddr>() {
        Ok(ip) => check_worker_ip(ip, allow),
        Err(_) => Ok(()),
    }
}

/// Full address check at registration: a literal IP is checked as is; a hostname,
/// when an allow-list is set, is resolved and every address it resolves to must pass.
pub(crate) async fn check_worker_host(
    host: &str,
    port: u16,
    allow: &[IpNet],
) -> Result<(), String> {
    if host.parse::<IpAddr>().is_ok() || allow.is_empty() {
        return check_worker_literal(host, allow);
    }
    let addrs = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("cannot resolve {host}: {e}"))?;
    let mut any = false;
    for a in addrs {
        any = true;
        check_worker_ip(a.ip(), allow).map_err(|e| format!("{host} resolves to {e}"))?;
    }
    if !any {
        return Err(format!("{host} resolves to no address"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The canonical URL alone.
    fn canonical(raw: &str) -> Result<String, String> {
        parse_worker_url(raw).map(|a| a.url)
    }

    #[test]
    fn addresses_are_normalized() {
        let a = parse_worker_address("http://127.0.0.1:30000/").expect("ok");
        assert_eq!(
            (a.url.as_str(), a.host.as_str()),
            ("http://127.0.0.1:30000", "127.0.0.1")
        );
        assert_eq!(worker_url_key("127.0.0.1:30000"), "http://127.0.0.1:30000");
        assert_eq!(worker_url_key(" http://h:1// "), "http://h:1");
        assert_eq!(
            worker_url_key("https://h:1/"),
            "https://h:1",
            "kept as given"
        );
        let a = parse_worker_address("http://[::1]:5/x/").expect("ok");
        assert_eq!(
            (a.url.as_str(), a.host.as_str()),
            ("http://[::1]:5/x", "::1")
        );
        for bad in ["", "https://h:1", "http://h:1/?a=b", "http://:1", "ftp://h"] {
            assert!(
                parse_worker_address(bad).is_err(),
                "{bad:?} must be refused"
            );
        }
    }

    #[test]
    fn configured_urls_need_their_scheme() {
        assert_eq!(canonical(" http://a:1/ ").as_deref(), Ok("http://a:1"));
        assert_eq!(canonical("http://b:2").as_deref(), Ok("http://b:2"));
        for bad in [
            "127.0.0.1:30000",
            "localhost:30000",
            "ftp://x",
            "https://h:1",
            "http://h:1#f",
            "http://h:1/?a=b",
            "http://:1",
            "",
        ] {
            assert!(canonical(bad).is_err(), "{bad:?} must be refused");
        }
        assert_eq!(
            canonical("ftp://x"),
            Err("only http:// workers are supported".to_string())
        );
    }

    #[test]
    fn spellings_of_one_worker_share_one_canonical_url() {
        for raw in [
            "http://127.0.0.1:30000",
            "http://localhost:30000/",
            "http://LOCALHOST:30000",
            "localhost:30000",
            "http://user:pw@127.0.0.1:30000",
            "http://user:pw@localhost:30000//",
        ] {
            assert_eq!(worker_url_key(raw), "http://127.0.0.1:30000", "{raw}");
        }
        assert_eq!(
            worker_url_key("http://Host.Example:80/"),
            "http://host.example"
        );
        assert_eq!(worker_url_key("http://host.example"), "http://host.example");
        assert_eq!(
            worker_url_key("http://Host.Example.:80/"),
            "http://host.example"
        );
        assert_eq!(worker_url_key("http://[::]:5"), "http://[::1]:5");
        assert_eq!(worker_url_key("http://[::1]:5"), "http://[::1]:5");
        for raw in [
            "http://[::ffff:127.0.0.1]:30000",
            "http://[::FFFF:7f00:1]:30000/",
            "http://0x7f000001:30000",
            "http://127.1:30000",
            "HTTP://127.0.0.1:030000",
            "http://localhost.:30000",
            "http://0.0.0.0:30000/",
            "http://127.0.0.1.:30000",
        ] {
            assert_eq!(worker_url_key(raw), "http://127.0.0.1:30000", "{raw}");
        }
    }

    #[test]
    fn credentials_are_split_off_and_never_printed() {
        let a = parse_worker_url("http://us%40er:p%3Ass@h:1/").expect("ok");
        assert_eq!(a.url, "http://h:1");
        let c = a.credentials.clone().expect("credentials");
        assert_eq!(
            (c.username.as_str(), c.password.as_str()),
            ("us@er", "p:ss")
        );
        assert!(!format!("{a:?}").contains("p:ss"));
        assert_eq!(format!("{c:?}"), "***");
        let c = Credentials {
            username: "user".into(),
            password: "secretpw".into(),
        };
        assert_eq!(c.basic_authorization(), "Basic dXNlcjpzZWNyZXRwdw==");
        assert!(parse_worker_url("http://h:1")
            .expect("ok")
            .credentials
            .is_none());
    }

    #[test]
    fn link_local_and_allow_list() {
        let net = |s: &str| s.parse::<IpNet>().expect("cidr");
        assert!(check_worker_literal("169.254.169.254", &[]).is_err());
        assert!(check_worker_literal("fe80::1", &[]).is_err());
        assert!(check_worker_literal("127.0.0.1", &[]).is_ok());
        assert!(check_worker_literal("worker.example", &[]).is_ok());
        let allow = [net("10.0.0.0/8"), net("169.254.0.0/16")];
        assert!(check_worker_literal("10.1.2.3", &allow).is_ok());
        assert!(check_worker_literal("169.254.169.254", &allow).is_ok());
        let e = check_worker_literal("127.0.0.1", &allow).expect_err("outside");
        assert!(e.contains("--worker-allow-cidr"), "{e}");
    }

    /// Issue 25 finding 4: IPv6 spellings of the metadata address were accepted. Each
    /// spelling goes through the URL parser first, as a registration does.
    #[test]
    fn ipv6_spellings_of_the_metadata_address_are_refused() {
        for raw in [
            "http://[::ffff:169.254.169.254]:80",
            "http://[::ffff:a9fe:a9fe]",
            "http://[0:0:0:0:0:ffff:169.254.169.254]/",
            "http://[::169.254.169.254]",
            "http://[::a9fe:a9fe]:8080",
            "http://[64:ff9b::169.254.169.254]",
            "http://[64:ff9b::a9fe:a9fe]",
            "http://[64:ff9b:1:a9fe:a9:fe00::]",
        ] {
            let a = parse_worker_url(raw).expect("parses");
            let e = check_worker_literal(&a.host, &[]).expect_err(raw);
            assert!(
                e.contains("link-local") && e.contains("169.254.169.254"),
                "{raw}: {e}"
            );
        }
        // Other link-local spellings in IPv6 form.
        assert!(check_worker_literal("::ffff:169.254.0.1", &[]).is_err());
        assert!(check_worker_literal("64:ff9b::a9fe:1", &[]).is_err());
        // Embedded addresses that are not link-local stay allowed, and so do `::`/`::1`.
        for ok in [
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "::1",
            "::",
            "2001:db8::a9fe:a9fe",
        ] {
            assert!(check_worker_literal(ok, &[]).is_ok(), "{ok}");
        }
    }

    #[test]
    fn ipv4_spellings_are_canonical_before_the_check() {
        // The WHATWG parser turns these into dotted quads; the check sees 169.254.169.254.
        for raw in [
            "http://0xa9fea9fe",
            "http://0xA9.0xFE.0xA9.0xFE/",
            "http://0251.0376.0251.0376",
            "http://2852039166:80",
            "http://169.254.43518",
            "http://169.16689662",
        ] {
            let a = parse_worker_url(raw).expect("parses");
            assert_eq!(a.host, "169.254.169.254", "{raw}");
            assert!(check_worker_literal(&a.host, &[]).is_err(), "{raw}");
        }
    }

    #[test]
    fn the_allow_list_judges_the_reached_address() {
        let net = |s: &str| s.parse::<IpNet>().expect("cidr");
        let allow = [net("10.0.0.0/8")];
        assert!(check_worker_literal("::ffff:10.1.2.3", &allow).is_ok());
        assert!(check_worker_literal("::ffff:169.254.169.254", &allow).is_err());
        assert!(check_worker_literal("64:ff9b::a9fe:a9fe", &allow).is_err());
        let allow = [net("169.254.0.0/16")];
        assert!(check_worker_literal("::ffff:169.254.169.254", &allow).is_ok());
    }

    #[test]
    fn embedded_ipv4_addresses() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        assert_eq!(effective_ip(ip("::ffff:1.2.3.4")), ip("1.2.3.4"));
        assert_eq!(effective_ip(ip("::1.2.3.4")), ip("1.2.3.4"));
        assert_eq!(effective_ip(ip("64:ff9b::1.2.3.4")), ip("1.2.3.4"));
        assert_eq!(effective_ip(ip("64:ff9b:1:102:3:400::")), ip("1.2.3.4"));
        for same in ["::1", "::", "fe80::1", "2001:db8::1", "1.2.3.4"] {
            assert_eq!(effective_ip(ip(same)), ip(same));
        }
    }
}
