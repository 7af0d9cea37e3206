//! The PD flags (`--pd-disaggregation`, `--prefill`, `--decode`, `--prefill-policy`,
//! `--decode-policy`) validated into `pd::PdConfig`.

use super::{invalid, ConfigError, Mode, Options};
use crate::pd::{LegPolicy, PdConfig, PrefillUrl};

/// A leg policy from an sgl-router / SMG policy name (`bucket`, prefill-only in sgl-router,
/// balances by load: least-load here). `cache_aware` needs the KV index (`--mode kv`).
fn leg_policy(
    field: &str,
    name: &str,
    mode: Mode,
) -> Result<(LegPolicy, Option<String>), ConfigError> {
    let (mapped, warning) = if name.trim().eq_ignore_ascii_case("bucket") {
        (
            Mode::LeastLoad,
            Some(format!(
                "--{} bucket maps to least-load",
                field.replace('_', "-")
            )),
        )
    } else {
        Mode::from_policy(name).map_err(|e| invalid(field, e))?
    };
    match mapped {
        Mode::Kv if mode != Mode::Kv => Err(invalid(
            field,
            format!("{name} needs the KV index: use --mode kv (the default) or another policy"),
        )),
        Mode::Kv => Ok((LegPolicy::Router, warning)),
        m if m == mode => Ok((LegPolicy::Router, warning)),
        m => Ok((LegPolicy::Basic(m), warning)),
    }
}

fn canonical(field: &str, raw: &str, allow: &[ipnet::IpNet]) -> Result<String, ConfigError> {
    let addr = crate::workers::url::parse_worker_url(raw)
        .map_err(|e| invalid(field, format!("{raw:?}: {e}")))?;
    if addr.credentials.is_some() {
        return Err(invalid(
            field,
            "credentials in a PD worker URL are not supported: use --api-key or POST /workers {\"api_key\"}",
        ));
    }
    crate::workers::url::check_worker_literal(&addr.host, allow)
        .map_err(|e| invalid(field, format!("{}: {e}", addr.url)))?;
    Ok(addr.url)
}

/// Without `--pd-disaggregation`, the first PD-only flag given is an error.
fn refuse_pd_flags(o: &Options) -> Result<(), ConfigError> {
    for (field, given) in [
        ("prefill", !o.prefill.is_empty()),
        ("decode", !o.decode.is_empty()),
        ("prefill_policy", o.prefill_policy.is_some()),
        ("decode_policy", o.decode_policy.is_some()),
    ] {
        if given {
            return Err(invalid(field, "needs --pd-disaggregation"));
        }
    }
    Ok(())
}

/// The `--prefill` entries (`URL [BOOTSTRAP_PORT|none]`), the first of each URL kept.
fn prefill_urls(
    entries: &[String],
    allow: &[ipnet::IpNet],
) -> Result<Vec<PrefillUrl>, ConfigError> {
    let mut prefill: Vec<PrefillUrl> = Vec::new();
    for entry in entries {
        let p = prefill_url(entry, allow)?;
        if !prefill.iter().any(|q| q.url == p.url) {
            prefill.push(p);
        }
    }
    Ok(prefill)
}

/// One `--prefill` entry: `URL [BOOTSTRAP_PORT|none]`.
fn prefill_url(entry: &str, allow: &[ipnet::IpNet]) -> Result<PrefillUrl, ConfigError> {
    let values: Vec<&str> = entry.split_whitespace().collect();
    let (url, port) = match values.as_slice() {
        [url] => (url, None),
        [url, port] => (url, Some(port)),
        _ => return Err(invalid("prefill", "expected URL [BOOTSTRAP_PORT|none]")),
    };
    let url = canonical("prefill", url, allow)?;
    let bootstrap_port = match port.map(|p| p.trim()) {
        None => None,
        Some(p) if p.eq_ignore_ascii_case("none") => None,
        Some(p) => Some(p.parse::<u16>().map_err(|_| {
            invalid(
                "prefill",
                format!("{url}: bootstrap port {p:?} is neither a port nor none"),
            )
        })?),
    };
    Ok(PrefillUrl {
        url,
        bootstrap_port,
    })
}

/// The `--decode` URLs, the first of each kept; none may also be a prefill worker.
fn decode_urls(
    raw: &[String],
    prefill: &[PrefillUrl],
    allow: &[ipnet::IpNet],
) -> Result<Vec<String>, ConfigError> {
    let mut decode = Vec::new();
    for raw in raw {
        let url = canonical("decode", raw, allow)?;
        if prefill.iter().any(|p| p.url == url) {
            return Err(invalid(
                "decode",
                format!("{url} is also a --prefill worker"),
            ));
        }
        if !decode.contains(&url) {
            decode.push(url);
        }
    }
    Ok(decode)
}

/// The prefill and decode leg policies and the warnings their names mapped with.
fn leg_policies(
    o: &Options,
    mode: Mode,
) -> Result<(LegPolicy, LegPolicy, Vec<String>), ConfigError> {
    let mut warnings = Vec::new();
    let mut pick = |field: &str, given: &Option<String>, default| match given {
        None => Ok(default),
        Some(name) => {
            let (p, w) = leg_policy(field, name, mode)?;
            warnings.extend(w);
            Ok::<_, ConfigError>(p)
        }
    };
    let prefill_policy = pick("prefill_policy", &o.prefill_policy, LegPolicy::Router)?;
    let decode_policy = match pick("decode_policy", &o.decode_policy, LegPolicy::Auto)? {
        // cache_aware on decode: the index only where decode workers publish their cache.
        LegPolicy::Router if mode == Mode::Kv => LegPolicy::Auto,
        p => p,
    };
    Ok((prefill_policy, decode_policy, warnings))
}

impl PdConfig {
    /// The PD settings of `o` (`mode`: the validated routing mode) and the warnings to log;
    /// `None` without `--pd-disaggregation` (then `--prefill` / `--decode` are errors).
    pub fn from_options(
        o: &Options,
        mode: Mode,
        allow: &[ipnet::IpNet],
    ) -> Result<(Option<PdConfig>, Vec<String>), ConfigError> {
        if !o.pd_disaggregation {
            refuse_pd_flags(o)?;
            return Ok((None, Vec::new()));
        }
        if !o.worker_urls.is_empty() {
            return Err(invalid(
                "worker_urls",
                "--pd-disaggregation takes its workers from --prefill / --decode (or POST /workers with worker_type)",
            ));
        }
        let prefill = prefill_urls(&o.prefill, allow)?;
        let decode = decode_urls(&o.decode, &prefill, allow)?;
        let (prefill_policy, decode_policy, warnings) = leg_policies(o, mode)?;
        Ok((
            Some(PdConfig {
                prefill,
                decode,
                prefill_policy,
                decode_policy,
            }),
            warnings,
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::Parser;

    fn pd(args: &[&str]) -> Result<Option<PdConfig>, ConfigError> {
        let mut all = vec!["router"];
        all.extend_from_slice(args);
        let cli = crate::config::Cli::try_parse_from(all).unwrap();
        PdConfig::from_options(&cli.options, Mode::Kv, &[]).map(|(c, _)| c)
    }

    #[test]
    fn sgl_router_command_line() {
        let c = pd(&[
            "--pd-disaggregation",
            "--prefill",
            "http://p1:30000",
            "8998",
            "--prefill",
            "http://p2:30000",
            "none",
            "--prefill",
            "http://[::1]:30001",
            "--decode",
            "http://d1:30000",
            "--decode",
            "http://d2:30000",
            "--decode-policy",
            "round_robin",
        ])
        .unwrap()
        .unwrap();
        let ports: Vec<_> = c.prefill.iter().map(|p| p.bootstrap_port).collect();
        assert_eq!(ports, [Some(8998), None, None]);
        assert_eq!(c.prefill[2].url, "http://[::1]:30001");
        assert_eq!(c.decode, ["http://d1:30000", "http://d2:30000"]);
        assert_eq!(c.prefill_policy, LegPolicy::Router);
        assert_eq!(c.decode_policy, LegPolicy::Basic(Mode::RoundRobin));
        let specs = c.startup_workers();
        assert_eq!(specs.len(), 5);
        assert_eq!(specs[0].1.worker_type(), "prefill");
        assert_eq!(specs[0].1.bootstrap_port, Some(8998));
        assert_eq!(specs[4].1.worker_type(), "decode");
    }

    #[test]
    fn policies_and_errors() {
        let c = pd(&[
            "--pd-disaggregation",
            "--prefill-policy",
            "cache_aware",
            "--decode-policy",
            "power_of_two",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(c.prefill_policy, LegPolicy::Router);
        assert_eq!(c.decode_policy, LegPolicy::Basic(Mode::LeastLoad));
        let c = pd(&["--pd-disaggregation", "--decode-policy", "cache_aware"])
            .unwrap()
            .unwrap();
        assert_eq!(c.decode_policy, LegPolicy::Auto);
        assert!(pd(&["--prefill", "http://p:1"])
            .unwrap_err()
            .message
            .contains("--pd-disaggregation"));
        assert_eq!(pd(&[]).unwrap(), None);
        let e = pd(&["--pd-disaggregation", "--prefill", "http://p:1", "port"]).unwrap_err();
        assert!(e.message.contains("neither a port nor none"), "{e}");
        let e = pd(&[
            "--pd-disaggregation",
            "--prefill",
            "http://p:1",
            "--decode",
            "http://p:1",
        ])
        .unwrap_err();
        assert!(e.message.contains("also a --prefill"), "{e}");
        let e = pd(&["--pd-disaggregation", "--worker-urls", "http://w:1"]).unwrap_err();
        assert_eq!(e.field, "worker_urls");
        let cli = crate::config::Cli::try_parse_from([
            "router",
            "--pd-disaggregation",
            "--prefill-policy",
            "cache_aware",
        ])
        .unwrap();
        let e = PdConfig::from_options(&cli.options, Mode::RoundRobin, &[]).unwrap_err();
        assert!(e.message.contains("--mode kv"), "{e}");
    }
}
