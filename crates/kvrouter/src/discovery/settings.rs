//! `EtcdConfig`: the validated etcd discovery settings (`--etcd-endpoints`, `--etcd-prefix`,
//! `--etcd-lease-ttl-secs`, `--etcd-advertise-url`), shared by the router and the `register`
//! subcommand, and the one way to open an etcd client with them; `config::etcd` builds it
//! from the options with the checks here.

use std::time::Duration;

/// Validated etcd settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// `host:port` or `http://host:port`, as etcd-client accepts them.
    pub endpoints: Vec<String>,
    /// Key prefix without a trailing `/` (`/kvrouter`).
    pub prefix: String,
    /// Lease TTL in seconds.
    pub lease_ttl_secs: i64,
    /// What this router writes as its URL under `<prefix>/routers/` (None: `http://host:port`).
    pub advertise_url: Option<String>,
}

/// Splits comma/space separated endpoint lists and checks each is `[http://]host:port`.
pub(crate) fn parse_endpoints(raw: &[String]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in raw
        .iter()
        .flat_map(|r| r.split([',', ' ']))
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        if part.starts_with("https://") {
            return Err(format!("{part:?}: TLS to etcd is not supported yet"));
        }
        let hostport = part.strip_prefix("http://").unwrap_or(part);
        let hostport = hostport.trim_end_matches('/');
        let port_ok = hostport
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
        if !port_ok || hostport.contains('/') || hostport.contains('@') {
            return Err(format!("{part:?} is not host:port or http://host:port"));
        }
        out.push(format!("http://{hostport}"));
    }
    Ok(out)
}

/// `/kvrouter/` and `kvrouter` both become `/kvrouter`; empty and `/` are refused (the router
/// would watch the whole keyspace).
pub(crate) fn normalize_prefix(raw: &str) -> Result<String, String> {
    let trimmed = raw.trim().trim_end_matches('/');
    if trimmed.is_empty() {
        return Err("must name a key prefix such as /kvrouter".to_string());
    }
    if trimmed.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{raw:?} contains whitespace"));
    }
    Ok(if trimmed.starts_with('/') {
        trimmed.to_string()
    } else {
        format!("/{trimmed}")
    })
}

/// Lease TTLs below etcd's own minimum (about 1.5 s with default election settings) are
/// raised by etcd silently; refuse them here instead, and cap at a day.
pub(crate) fn check_ttl(ttl: u64) -> Result<i64, String> {
    match i64::try_from(ttl) {
        Ok(t) if (2..=86_400).contains(&t) => Ok(t),
        _ => Err(format!("must be between 2 and 86400 seconds (got {ttl})")),
    }
}

impl EtcdConfig {
    /// The lease TTL as a duration.
    pub fn lease_ttl(&self) -> Duration {
        Duration::from_secs(self.lease_ttl_secs.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Options;

    #[cfg(not(feature = "etcd"))]
    #[test]
    fn refused_without_the_feature() {
        let o = Options {
            etcd_endpoints: vec!["127.0.0.1:2379".into()],
            ..Options::default()
        };
        let e = EtcdConfig::from_options(&o).unwrap_err();
        assert_eq!(e.field, "etcd_endpoints");
        assert!(e.message.contains("--features etcd"), "{}", e.message);
        assert_eq!(EtcdConfig::from_options(&Options::default()), Ok(None));
    }

    use super::*;

    #[test]
    fn endpoints_prefix_and_ttl() {
        let raw = vec!["127.0.0.1:2379, http://etcd-0.etcd:2379/".to_string()];
        assert_eq!(
            parse_endpoints(&raw).unwrap(),
            vec!["http://127.0.0.1:2379", "http://etcd-0.etcd:2379"]
        );
        assert!(parse_endpoints(&["etcd".to_string()]).is_err());
        assert!(parse_endpoints(&["https://etcd:2379".to_string()]).is_err());
        assert!(parse_endpoints(&["u:p@etcd:2379".to_string()]).is_err());
        assert_eq!(normalize_prefix("kvrouter/").unwrap(), "/kvrouter");
        assert_eq!(normalize_prefix("/a/b").unwrap(), "/a/b");
        assert!(normalize_prefix("/").is_err());
        assert!(check_ttl(1).is_err());
        assert_eq!(check_ttl(10).unwrap(), 10);
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn absent_without_endpoints() {
        assert_eq!(EtcdConfig::from_options(&Options::default()), Ok(None));
        let o = Options {
            etcd_endpoints: vec!["127.0.0.1:2379".into()],
            etcd_lease_ttl_secs: 0,
            ..Options::default()
        };
        let e = EtcdConfig::from_options(&o).unwrap_err();
        assert_eq!(e.field, "etcd_lease_ttl_secs");
    }
}
