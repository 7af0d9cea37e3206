//! Worker URLs: the one definition of a valid worker URL and of its normalised form
//! (`http://host[:port][/path]`, no trailing slash), shared by the configuration
//! (`--worker-urls`) and the registry (`POST /workers`, lookups and removal by URL).

/// Validates a worker URL and returns its normalised form; the error is the reason
/// (without the URL). Accepts `http://` URLs with a host and no query or fragment.
pub fn normalize_worker_url(raw: &str) -> Result<String, String> {
    parse_worker_url(raw).map(|(url, _host)| url)
}

/// [`normalize_worker_url`] and the URL's host (an IPv6 address without brackets).
pub fn parse_worker_url(raw: &str) -> Result<(String, String), String> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Err("empty".to_string());
    }
    let parsed = url::Url::parse(trimmed).map_err(|e| e.to_string())?;
    if parsed.scheme() != "http" {
        return Err("only http:// workers are supported".to_string());
    }
    let host = parsed
        .host_str()
        .ok_or_else(|| "no host".to_string())?
        .trim_matches(|c| c == '[' || c == ']')
        .to_string();
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err("a worker url has no query or fragment".to_string());
    }
    Ok((parsed.as_str().trim_end_matches('/').to_string(), host))
}

/// The admin API's form of [`parse_worker_url`]: `http://` is assumed when `raw`
/// names no scheme (`host:port`).
pub fn parse_worker_address(raw: &str) -> Result<(String, String), String> {
    let trimmed = raw.trim();
    if trimmed.is_empty() || trimmed.contains("://") {
        parse_worker_url(trimmed)
    } else {
        parse_worker_url(&format!("http://{trimmed}"))
    }
}

/// Infallible lookup key for a URL a client gave: the normalised form of
/// [`parse_worker_address`], or the input trimmed (and without trailing slashes)
/// when it is not a valid worker URL.
pub fn worker_url_key(raw: &str) -> String {
    parse_worker_address(raw)
        .map(|(url, _host)| url)
        .unwrap_or_else(|_| raw.trim().trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_normalized() {
        assert_eq!(
            parse_worker_address("http://127.0.0.1:30000/").expect("ok"),
            (
                "http://127.0.0.1:30000".to_string(),
                "127.0.0.1".to_string()
            )
        );
        assert_eq!(worker_url_key("127.0.0.1:30000"), "http://127.0.0.1:30000");
        assert_eq!(worker_url_key(" http://h:1// "), "http://h:1");
        assert_eq!(
            worker_url_key("https://h:1/"),
            "https://h:1",
            "kept as given"
        );
        assert_eq!(
            parse_worker_address("http://[::1]:5/x/").expect("ok"),
            ("http://[::1]:5/x".to_string(), "::1".to_string())
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
        assert_eq!(
            normalize_worker_url(" http://a:1/ ").as_deref(),
            Ok("http://a:1")
        );
        assert_eq!(
            normalize_worker_url("http://b:2").as_deref(),
            Ok("http://b:2")
        );
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
            assert!(
                normalize_worker_url(bad).is_err(),
                "{bad:?} must be refused"
            );
        }
        assert_eq!(
            normalize_worker_url("ftp://x"),
            Err("only http:// workers are supported".to_string())
        );
    }
}
