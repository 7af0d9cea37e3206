//! Where the load publisher binds: SGLang 0.5.23's `resolve_load_pub_range`
//! (`disaggregation/kv_events.py`), the one rule both its scheduler's bind
//! (`SchedulerLoadPublisher.__init__`) and `/server_info`'s `kv_events` block
//! (`describe_kv_events_publisher`) use, and the TCP endpoint parses it relies on.

/// Hosts a PUB socket binds rather than connects to (`_BIND_WILDCARD_HOSTS`).
const BIND_WILDCARD_HOSTS: [&str; 3] = ["*", "0.0.0.0", "::"];

/// `host:port` of a `tcp://` endpoint as `NetworkAddress.parse` splits it: an IPv6 host
/// must be bracketed (`[::1]:5557`, host returned without brackets), a bare IPv6 host is
/// rejected, the port must be a number in 1..=65535. `None` for anything else.
pub fn parse_tcp(endpoint: Option<&str>) -> Option<(String, bool, u16)> {
    let rest = endpoint?.strip_prefix("tcp://")?;
    let (host, port, v6) = if let Some(r) = rest.strip_prefix('[') {
        let (h, p) = r.split_once("]:")?;
        (h, p, true)
    } else {
        let (h, p) = rest.rsplit_once(':')?;
        if h.contains(':') {
            return None;
        }
        (h, p, false)
    };
    let port: u32 = port.parse().ok()?;
    let port = u16::try_from(port).ok().filter(|p| *p > 0)?;
    Some((host.to_string(), v6, port))
}

/// `parse_tcp_port`: the legal port of a `tcp://` endpoint, any host.
pub fn tcp_port(endpoint: Option<&str>) -> Option<u16> {
    parse_tcp(endpoint).map(|(_, _, p)| p)
}

/// `parse_advertisable_tcp`: `(host, port)` fit for `/server_info` (IPv6 re-bracketed).
pub fn advertisable(endpoint: Option<&str>) -> Option<(String, u16)> {
    let (host, v6, port) = parse_tcp(endpoint)?;
    if host.is_empty() {
        return None;
    }
    Some((if v6 { format!("[{host}]") } else { host }, port))
}

/// `parse_bindable_tcp`: `(host, port)` when a PUB socket would bind it (wildcard host).
fn bindable(endpoint: Option<&str>) -> Option<(String, u16)> {
    let (host, _, port) = parse_tcp(endpoint)?;
    BIND_WILDCARD_HOSTS
        .contains(&host.as_str())
        .then_some((host, port))
}

/// The resolved load range: rank `r` binds `host:(base + r)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadRange {
    /// Wildcard host as written (`*`, `0.0.0.0` or `::`).
    pub host: String,
    pub base: u16,
}

/// `resolve_load_pub_range`: `Ok(None)` when off (unset or `off`), `Ok(Some)` when it
/// resolves, `Err(reason)` when SGLang declines it (its `check_load_publish_args` then
/// fails startup with that reason, as the mock does).
pub fn resolve(
    kv_endpoint: Option<&str>,
    replay_endpoint: Option<&str>,
    dp_size: usize,
    mode: Option<&str>,
) -> Result<Option<LoadRange>, String> {
    let mode = mode.unwrap_or("").trim();
    if dp_size < 1 || mode.is_empty() || mode.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let dp = dp_size as u64;
    let overlaps = |a: u64, b: u64| a < b + dp && b < a + dp;
    let (host, base) = if mode.eq_ignore_ascii_case("auto") {
        let Some((host, kv_base)) = bindable(kv_endpoint) else {
            let why = match kv_endpoint {
                None => "--kv-events-config is not set".to_string(),
                Some(e) => format!("{e:?} is not one"),
            };
            return Err(format!(
                "--load-publish-endpoint=auto needs a bindable wildcard-host tcp:// \
                 --kv-events-config endpoint to pack after; {why}"
            ));
        };
        let mut base = u64::from(kv_base) + dp;
        if let Some(replay) = tcp_port(replay_endpoint).map(u64::from) {
            if overlaps(base, replay) {
                base = replay + dp;
            }
        }
        (host, base)
    } else {
        if tcp_port(kv_endpoint).is_none() {
            return Err(format!(
                "--load-publish-endpoint={mode:?} needs a routable tcp:// --kv-events-config \
                 endpoint: routers discover the load range through /server_info's kv_events block"
            ));
        }
        let Some((host, base)) = bindable(Some(mode)) else {
            return Err(format!(
                "--load-publish-endpoint={mode:?} is not a bindable tcp:// address \
                 (a concrete host would be connected to, not bound)"
            ));
        };
        let base = u64::from(base);
        for port in [tcp_port(kv_endpoint), tcp_port(replay_endpoint)]
            .into_iter()
            .flatten()
        {
            let port = u64::from(port);
            if overlaps(base, port) {
                return Err(format!(
                    "--load-publish-endpoint range [{base}, {}) overlaps the kv-events range [{port}, {})",
                    base + dp,
                    port + dp
                ));
            }
        }
        (host, base)
    };
    if base + dp - 1 > 65535 {
        return Err(format!(
            "load port range from {base} would run past the u16 ceiling"
        ));
    }
    let base = u16::try_from(base).map_err(|_| format!("load port {base} out of range"))?;
    Ok(Some(LoadRange { host, base }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_packs_after_kv_and_past_replay() {
        // The reference run: KV 19001, replay 19002 -> load 19003 (dp 1); dp 2 -> 19004.
        let r = resolve(
            Some("tcp://*:19001"),
            Some("tcp://*:19002"),
            1,
            Some("auto"),
        );
        assert_eq!(r.unwrap().unwrap().base, 19003);
        let r = resolve(
            Some("tcp://*:19001"),
            Some("tcp://*:19002"),
            2,
            Some("auto"),
        );
        assert_eq!(r.unwrap().unwrap().base, 19004);
        let r = resolve(Some("tcp://*:5557"), None, 2, Some("AUTO"));
        assert_eq!(
            r.unwrap(),
            Some(LoadRange {
                host: "*".into(),
                base: 5559
            })
        );
        let r = resolve(
            Some("tcp://0.0.0.0:19078"),
            Some("tcp://0.0.0.0:19079"),
            1,
            Some("auto"),
        );
        assert_eq!(r.unwrap().unwrap().base, 19080);
    }

    #[test]
    fn off_and_declines() {
        assert_eq!(resolve(Some("tcp://*:5557"), None, 1, None), Ok(None));
        assert_eq!(
            resolve(Some("tcp://*:5557"), None, 1, Some(" off ")),
            Ok(None)
        );
        // auto needs a wildcard host.
        assert!(resolve(Some("tcp://127.0.0.1:5557"), None, 1, Some("auto")).is_err());
        assert!(resolve(None, None, 1, Some("auto")).is_err());
        // explicit: bindable, no overlap, below the u16 ceiling.
        assert_eq!(
            resolve(Some("tcp://*:5557"), None, 1, Some("tcp://*:6000"))
                .unwrap()
                .unwrap()
                .base,
            6000
        );
        assert!(resolve(Some("tcp://*:5557"), None, 1, Some("tcp://10.0.0.1:6000")).is_err());
        assert!(resolve(Some("tcp://*:5557"), None, 2, Some("tcp://*:5558")).is_err());
        assert!(resolve(Some("tcp://*:5557"), None, 2, Some("tcp://*:65535")).is_err());
        assert!(resolve(Some("ipc:///tmp/x"), None, 1, Some("tcp://*:6000")).is_err());
    }

    #[test]
    fn endpoint_parses() {
        assert_eq!(
            advertisable(Some("tcp://[::]:5557")),
            Some(("[::]".into(), 5557))
        );
        assert_eq!(advertisable(Some("tcp://::1:5557")), None);
        assert_eq!(advertisable(Some("tcp://*:0")), None);
        assert_eq!(advertisable(Some("tcp://host:99999")), None);
        assert_eq!(advertisable(Some("ipc:///tmp/x")), None);
        assert_eq!(tcp_port(Some("tcp://127.0.0.1:19088")), Some(19088));
        assert_eq!(bindable(Some("tcp://[::]:1")), Some(("::".into(), 1)));
    }
}
