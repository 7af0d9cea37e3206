//! `WorkerSources`: where the fleet's workers come from (`--worker-urls` with the credentials
//! split off them, `--worker-allow-cidr`, etcd discovery, the PD `--prefill` / `--decode`
//! lists), and the checks that parse the allowed networks and the worker URLs.

use super::{invalid, ConfigError};
use crate::discovery::EtcdConfig;
use crate::pd::PdConfig;
use crate::workers::url::{check_worker_literal, parse_worker_url, Credentials};

/// The validated worker sources.
#[derive(Debug, Clone)]
pub struct WorkerSources {
    /// Canonical, credential-free worker URLs.
    pub urls: Vec<String>,
    /// Credentials split off `--worker-urls`, by canonical URL (`Debug` prints `***`).
    pub credentials: Vec<(String, Credentials)>,
    /// `--worker-allow-cidr` (empty: every address but link-local ones).
    pub allow_cidr: Vec<ipnet::IpNet>,
    /// etcd discovery (`--etcd-endpoints`; None when not given), see `crate::discovery`.
    pub etcd: Option<EtcdConfig>,
    /// PD disaggregation (`--pd-disaggregation`; None when not given), see `crate::pd`.
    pub pd: Option<PdConfig>,
}

/// `--worker-allow-cidr` values (each a space- or comma-separated list) as networks.
pub(super) fn allow_cidrs(raw: &[String]) -> Result<Vec<ipnet::IpNet>, ConfigError> {
    let mut worker_allow_cidr = Vec::new();
    for raw in raw {
        for part in raw.split([' ', ',']).filter(|s| !s.is_empty()) {
            let net = part
                .parse::<ipnet::IpNet>()
                .map_err(|e| invalid("worker_allow_cidr", format!("{part:?}: {e}")))?;
            worker_allow_cidr.push(net);
        }
    }
    Ok(worker_allow_cidr)
}

/// Worker URLs, and the credentials some of them carried.
pub(super) type WorkerUrls = (Vec<String>, Vec<(String, Credentials)>);

/// Worker URLs and their credentials of `--worker-urls` values (each whitespace-separated):
/// parsed, checked against `allow`, the first of each URL kept.
pub(super) fn worker_urls(
    raw: &[String],
    allow: &[ipnet::IpNet],
) -> Result<WorkerUrls, ConfigError> {
    let mut worker_urls = Vec::new();
    let mut worker_credentials = Vec::new();
    for raw in raw {
        for part in raw.split_whitespace().filter(|s| !s.is_empty()) {
            let shown = match part.rsplit_once('@') {
                Some((_, rest)) => format!("***@{rest}"),
                None => part.to_string(),
            };
            let addr = parse_worker_url(part)
                .map_err(|e| invalid("worker_urls", format!("{shown:?}: {e}")))?;
            check_worker_literal(&addr.host, allow)
                .map_err(|e| invalid("worker_urls", format!("{}: {e}", addr.url)))?;
            if let Some(c) = addr.credentials {
                if !worker_credentials.iter().any(|(u, _)| *u == addr.url) {
                    worker_credentials.push((addr.url.clone(), c));
                }
            }
            if !worker_urls.contains(&addr.url) {
                worker_urls.push(addr.url);
            }
        }
    }
    Ok((worker_urls, worker_credentials))
}
