//! Where to subscribe: turns a worker's `kv_events_config` endpoint (as the worker
//! binds it, e.g. `tcp://*:5557`) into the address a router dials for one DP rank.

use url::Url;

/// Why an endpoint could not be derived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("worker url {0:?} has no host")]
    NoHost(String),
    #[error("event endpoint {0:?} is not tcp://host:port")]
    NotTcp(String),
    #[error("event endpoint {0:?}: port + rank overflows")]
    PortOverflow(String),
}

/// The endpoint to dial for `rank`: the worker URL's host (when the configured host
/// is a wildcard or loopback-agnostic bind address) and `port + rank`, as SGLang's
/// publisher offsets ports per attention-DP rank.
pub fn rank_endpoint(
    worker_url: &str,
    configured: &str,
    rank: u32,
) -> Result<String, EndpointError> {
    let rest = configured
        .strip_prefix("tcp://")
        .ok_or_else(|| EndpointError::NotTcp(configured.to_owned()))?;
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| EndpointError::NotTcp(configured.to_owned()))?;
    let port: u16 = port
        .parse()
        .map_err(|_| EndpointError::NotTcp(configured.to_owned()))?;
    let port = u16::try_from(u32::from(port) + rank)
        .map_err(|_| EndpointError::PortOverflow(configured.to_owned()))?;
    let host = match host {
        "*" | "0.0.0.0" | "[::]" | "::" | "" => {
            let url =
                Url::parse(worker_url).map_err(|_| EndpointError::NoHost(worker_url.to_owned()))?;
            url.host_str()
                .ok_or_else(|| EndpointError::NoHost(worker_url.to_owned()))?
                .to_owned()
        }
        other => other.to_owned(),
    };
    Ok(format!("tcp://{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_host_comes_from_the_worker_url_and_port_is_offset() {
        assert_eq!(
            rank_endpoint("http://10.0.0.5:30000", "tcp://*:5557", 0).unwrap(),
            "tcp://10.0.0.5:5557"
        );
        assert_eq!(
            rank_endpoint("http://node-a:30000/", "tcp://0.0.0.0:5557", 3).unwrap(),
            "tcp://node-a:5560"
        );
        assert_eq!(
            rank_endpoint("http://x:1", "tcp://events-host:6000", 1).unwrap(),
            "tcp://events-host:6001"
        );
    }

    #[test]
    fn bad_endpoints_are_errors() {
        assert!(rank_endpoint("http://x:1", "ipc:///tmp/x", 0).is_err());
        assert!(rank_endpoint("http://x:1", "tcp://*:notaport", 0).is_err());
        assert!(rank_endpoint("http://x:1", "tcp://*:65535", 1).is_err());
        assert!(rank_endpoint("not a url", "tcp://*:5557", 0).is_err());
    }
}
