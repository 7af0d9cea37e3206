//! The routing mode named by `--mode`.

use std::fmt;
use std::str::FromStr;

/// Which policy picks the worker for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// KV-cache-aware scoring (until it lands, the router falls back to least-load with a warning).
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
