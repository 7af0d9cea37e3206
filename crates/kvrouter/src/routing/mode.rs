//! The routing mode named by `--mode`, and the sgl-router / SMG `--policy` names mapped onto it.

use std::fmt;
use std::str::FromStr;

/// Which policy picks the worker for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// KV-cache-aware scoring (docs/kv-routing.md).
    Kv,
    RoundRobin,
    Random,
    LeastLoad,
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "kv" | "cache-aware" => Ok(Mode::Kv),
            "round-robin" => Ok(Mode::RoundRobin),
            "random" => Ok(Mode::Random),
            "least-load" => Ok(Mode::LeastLoad),
            _ => Err(format!(
                "unknown mode {s:?} (expected kv, round-robin, random or least-load)"
            )),
        }
    }
}

impl Mode {
    /// The mode for an sgl-router `--policy` name, with the warning to log when the mapping is
    /// not exact. manual / consistent_hashing / prefix_hash become least-load: every mode keeps
    /// an `X-SMG-Routing-Key` on its worker, and least-load never moves a key off its worker
    /// (kv may yield an overloaded one), placing new keys on the least-loaded worker (SMG
    /// manual's `min_load` assignment) instead of by hash.
    pub fn from_policy(policy: &str) -> Result<(Mode, Option<String>), String> {
        let p = policy.trim().to_ascii_lowercase().replace('-', "_");
        let sticky = |name: &str| {
            Some(format!(
                "--policy {name} maps to --mode least-load: X-SMG-Routing-Key requests stay on \
                 their worker (for --sticky-ttl-secs idle), new keys go to the least-loaded worker \
                 instead of a hash ring"
            ))
        };
        match p.as_str() {
            "cache_aware" => Ok((Mode::Kv, None)),
            "round_robin" => Ok((Mode::RoundRobin, None)),
            "random" => Ok((Mode::Random, None)),
            "least_load" => Ok((Mode::LeastLoad, None)),
            "passthrough" => Ok((
                Mode::RoundRobin,
                Some("--policy passthrough maps to --mode round-robin (SMG sends everything to the first healthy worker; with one worker they agree)".into()),
            )),
            "power_of_two" => Ok((
                Mode::LeastLoad,
                Some("--policy power_of_two maps to --mode least-load (least-loaded of all workers, not of two sampled)".into()),
            )),
            "manual" | "consistent_hashing" | "prefix_hash" => Ok((Mode::LeastLoad, sticky(&p))),
            _ => Err(format!(
                "unknown policy {policy:?} (expected cache_aware, round_robin, random, least_load, \
                 power_of_two, passthrough, manual, consistent_hashing or prefix_hash; bucket is \
                 PD-only)"
            )),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Kv => "kv",
            Mode::RoundRobin => "round-robin",
            Mode::Random => "random",
            Mode::LeastLoad => "least-load",
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::Mode;

    #[test]
    fn policies_map_onto_modes() {
        let m = |p: &str| Mode::from_policy(p).unwrap();
        assert_eq!(m("cache_aware"), (Mode::Kv, None));
        assert_eq!(m("round_robin"), (Mode::RoundRobin, None));
        assert_eq!(m("random"), (Mode::Random, None));
        assert_eq!(m("least_load"), (Mode::LeastLoad, None));
        assert_eq!(m("least-load"), (Mode::LeastLoad, None));
        assert_eq!(m("passthrough").0, Mode::RoundRobin);
        assert_eq!(m("power_of_two").0, Mode::LeastLoad);
        for sticky in ["manual", "consistent_hashing", "prefix_hash"] {
            let (mode, warning) = m(sticky);
            assert_eq!(mode, Mode::LeastLoad);
            let warning = warning.unwrap();
            assert!(
                warning.contains(sticky) && warning.contains("least-load"),
                "{warning}"
            );
        }
        assert!(Mode::from_policy("bucket").unwrap_err().contains("bucket"));
    }
}
