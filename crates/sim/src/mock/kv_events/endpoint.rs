//! ZMQ endpoint rules of SGLang 0.5.23's publisher (`disaggregation/kv_events.py`
//! `ZmqEventPublisher._socket_setup`): the config's `bind` decides when set, otherwise bind
//! when the endpoint has `*`, `::` or `0.0.0.0` or is `ipc://`/`inproc://`, connect
//! otherwise; DP rank `r` uses TCP port `P + r` (or the suffix `_dp{r}` for ipc/inproc,
//! `offset_endpoint_port`). The mock binds `*` on the `--host` address, `0.0.0.0` and any
//! other host as written.

/// One parsed endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `tcp://HOST:PORT` as written by the user (`HOST` may be `*` or `[::]`).
    Tcp { host: String, port: u16 },
    /// `ipc://...` or `inproc://...` (kept verbatim).
    Other(String),
}

impl Endpoint {
    /// Parses `tcp://host:port`, `ipc://path` or `inproc://name`.
    pub fn parse(s: &str) -> Result<Endpoint, String> {
        if let Some(rest) = s.strip_prefix("tcp://") {
            let (host, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| format!("endpoint {s:?} has no port"))?;
            let port = port
                .parse::<u16>()
                .map_err(|e| format!("endpoint {s:?}: bad port: {e}"))?;
            Ok(Endpoint::Tcp {
                host: host.to_string(),
                port,
            })
        } else if s.starts_with("ipc://") || s.starts_with("inproc://") {
            Ok(Endpoint::Other(s.to_string()))
        } else {
            Err(format!(
                "endpoint {s:?}: expected tcp://, ipc:// or inproc://"
            ))
        }
    }

    /// True when SGLang would bind (rather than connect) this endpoint without a `bind`
    /// setting.
    pub fn binds(&self) -> bool {
        match self {
            Endpoint::Tcp { host, .. } => {
                host.contains('*') || host.contains("::") || host.contains("0.0.0.0")
            }
            Endpoint::Other(_) => true,
        }
    }

    /// SGLang's choice with the config's `bind` (`None` = the heuristic).
    pub fn binds_with(&self, bind: Option<bool>) -> bool {
        bind.unwrap_or_else(|| self.binds())
    }

    /// The endpoint of DP rank `rank` given the rank-0 port `base`.
    pub fn for_rank(&self, rank: usize, base: u16) -> Result<Endpoint, String> {
        match self {
            Endpoint::Tcp { host, .. } => {
                let port = usize::from(base) + rank;
                let port = u16::try_from(port).map_err(|_| format!("port {port} out of range"))?;
                Ok(Endpoint::Tcp {
                    host: host.clone(),
                    port,
                })
            }
            Endpoint::Other(s) if rank > 0 => Ok(Endpoint::Other(format!("{s}_dp{rank}"))),
            Endpoint::Other(s) => Ok(Endpoint::Other(s.clone())),
        }
    }

    /// The address to hand to the zeromq crate (`*` replaced by `bind_host`).
    pub fn socket_addr(&self, bind_host: &str) -> String {
        match self {
            Endpoint::Tcp { host, port } if host.contains('*') => {
                format!("tcp://{bind_host}:{port}")
            }
            Endpoint::Tcp { host, port } if host.contains("::") && !host.starts_with('[') => {
                format!("tcp://[{host}]:{port}")
            }
            Endpoint::Tcp { host, port } => format!("tcp://{host}:{port}"),
            Endpoint::Other(s) => s.clone(),
        }
    }

    /// The endpoint as reported back to clients (user's host form).
    pub fn display(&self) -> String {
        match self {
            Endpoint::Tcp { host, port } => format!("tcp://{host}:{port}"),
            Endpoint::Other(s) => s.clone(),
        }
    }

    /// The TCP port (0 for ipc/inproc).
    pub fn port(&self) -> u16 {
        match self {
            Endpoint::Tcp { port, .. } => *port,
            Endpoint::Other(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_offsets_and_bind_rule() {
        let e = Endpoint::parse("tcp://*:5557").unwrap();
        assert!(e.binds());
        assert_eq!(e.for_rank(2, 5557).unwrap().display(), "tcp://*:5559");
        assert_eq!(e.socket_addr("127.0.0.1"), "tcp://127.0.0.1:5557");
        assert!(!Endpoint::parse("tcp://10.0.0.1:5557").unwrap().binds());
        let any = Endpoint::parse("tcp://0.0.0.0:5557").unwrap();
        assert!(any.binds());
        assert_eq!(any.socket_addr("127.0.0.1"), "tcp://0.0.0.0:5557");
        let lo = Endpoint::parse("tcp://127.0.0.2:5557").unwrap();
        assert!(lo.binds_with(Some(true)) && !lo.binds_with(None));
        let i = Endpoint::parse("inproc://ev").unwrap();
        assert_eq!(i.for_rank(1, 0).unwrap().display(), "inproc://ev_dp1");
        assert!(Endpoint::parse("http://x").is_err());
    }
}
