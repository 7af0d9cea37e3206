//! KV-mode settings: predict-on-route, cost weights, temperature, sticky overload rule, NATS feed.
//!
//! Flags are flattened into [`super::Cli`]; in the `--config` file they live under a `[kv]`
//! table with the same names (snake_case). Validation names the offending field.

use std::time::Duration;

use clap::Args;
use serde::Deserialize;

use super::{invalid, ConfigError};

/// KV-mode flags of the `router` binary (all optional; also `KVROUTER_*` env variables).
#[derive(Debug, Clone, Default, Args)]
pub struct KvCli {
    /// Seconds a routed request's blocks count as predicted-cached on its worker (predict-on-route).
    #[arg(long, env = "KVROUTER_PREDICT_TTL_SECS")]
    pub predict_ttl_secs: Option<f64>,
    /// Disable predict-on-route (score from KV events only).
    #[arg(long, env = "KVROUTER_NO_PREDICT", num_args = 0..=1, default_missing_value = "true")]
    pub no_predict: Option<bool>,
    /// Cost per block of prefill (the request's new blocks plus others' prefill in flight).
    #[arg(long, env = "KVROUTER_KV_PREFILL_WEIGHT")]
    pub kv_prefill_weight: Option<f64>,
    /// Cost per block of context held by requests in flight on the unit with another prompt (decode load).
    #[arg(long, env = "KVROUTER_KV_DECODE_WEIGHT")]
    pub kv_decode_weight: Option<f64>,
    /// Cost per request in flight on the unit (queue depth).
    #[arg(long, env = "KVROUTER_KV_QUEUE_WEIGHT")]
    pub kv_queue_weight: Option<f64>,
    /// Softmax temperature over costs (0 = always the cheapest).
    #[arg(long, env = "KVROUTER_TEMPERATURE")]
    pub temperature: Option<f64>,
    /// A sticky key's worker keeps the request unless it costs more than this many prefill blocks above the best.
    #[arg(long, env = "KVROUTER_STICKY_SLACK_BLOCKS")]
    pub sticky_slack_blocks: Option<f64>,
    /// A sticky key's worker is overloaded (and yields) when its cost exceeds this factor times the best cost, plus the slack.
    #[arg(long, env = "KVROUTER_STICKY_OVERLOAD_FACTOR")]
    pub sticky_overload_factor: Option<f64>,
    /// NATS server to consume KV events from (relayed SGLang batches and Dynamo RouterEvents).
    #[arg(long, env = "KVROUTER_NATS_URL")]
    pub nats_url: Option<String>,
    /// Republish the KV events read from worker ZMQ streams on NATS (needs --nats-url).
    #[arg(long, env = "KVROUTER_PUBLISH_EVENTS", num_args = 0..=1, default_missing_value = "true")]
    pub publish_events: Option<bool>,
}

/// The `[kv]` table of the configuration file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvFile {
    pub predict_ttl_secs: Option<f64>,
    pub no_predict: Option<bool>,
    pub kv_prefill_weight: Option<f64>,
    pub kv_decode_weight: Option<f64>,
    pub kv_queue_weight: Option<f64>,
    pub temperature: Option<f64>,
    pub sticky_slack_blocks: Option<f64>,
    pub sticky_overload_factor: Option<f64>,
    pub nats_url: Option<String>,
    pub publish_events: Option<bool>,
}

/// Validated KV-mode settings.
#[derive(Debug, Clone, PartialEq)]
pub struct KvConfig {
    /// Predict-on-route on (`--no-predict` turns it off).
    pub predict: bool,
    pub predict_ttl: Duration,
    pub prefill_weight: f64,
    pub decode_weight: f64,
    pub queue_weight: f64,
    pub temperature: f64,
    pub sticky_slack_blocks: f64,
    pub sticky_overload_factor: f64,
    pub nats_url: Option<String>,
    pub publish_events: bool,
}

impl Default for KvConfig {
    fn default() -> Self {
        KvConfig {
            predict: true,
            predict_ttl: Duration::from_secs(10),
            prefill_weight: 1.0,
            decode_weight: 1.0 / 8.0,
            queue_weight: 0.5,
            temperature: 0.0,
            sticky_slack_blocks: 32.0,
            sticky_overload_factor: 2.0,
            nats_url: None,
            publish_events: false,
        }
    }
}

fn weight(field: &str, v: Option<f64>, default: f64) -> Result<f64, ConfigError> {
    match v {
        None => Ok(default),
        Some(x) if x.is_finite() && x >= 0.0 => Ok(x),
        Some(x) => Err(invalid(
            field,
            format!("must be a finite number >= 0 (got {x})"),
        )),
    }
}

impl KvConfig {
    /// Merges CLI over file over defaults and validates.
    pub fn from_sources(cli: &KvCli, file: &KvFile) -> Result<KvConfig, ConfigError> {
        let d = KvConfig::default();
        macro_rules! pick {
            ($f:ident) => {
                cli.$f.clone().or(file.$f.clone())
            };
        }
        let predict_ttl = match pick!(predict_ttl_secs) {
            None => d.predict_ttl,
            Some(v) if v.is_finite() && v > 0.0 && v < 1e6 => Duration::from_secs_f64(v),
            Some(v) => {
                return Err(invalid(
                    "predict_ttl_secs",
                    format!("must be a positive number of seconds (got {v})"),
                ))
            }
        };
        let nats_url = match pick!(nats_url) {
            Some(u) if u.trim().is_empty() => {
                return Err(invalid("nats_url", "must not be empty when set"))
            }
            u => u,
        };
        let publish_events = pick!(publish_events).unwrap_or(false);
        if publish_events && nats_url.is_none() {
            return Err(invalid("publish_events", "needs --nats-url"));
        }
        Ok(KvConfig {
            predict: !pick!(no_predict).unwrap_or(false),
            predict_ttl,
            prefill_weight: weight(
                "kv_prefill_weight",
                pick!(kv_prefill_weight),
                d.prefill_weight,
            )?,
            decode_weight: weight("kv_decode_weight", pick!(kv_decode_weight), d.decode_weight)?,
            queue_weight: weight("kv_queue_weight", pick!(kv_queue_weight), d.queue_weight)?,
            temperature: weight("temperature", pick!(temperature), d.temperature)?,
            sticky_slack_blocks: weight(
                "sticky_slack_blocks",
                pick!(sticky_slack_blocks),
                d.sticky_slack_blocks,
            )?,
            sticky_overload_factor: match pick!(sticky_overload_factor) {
                None => d.sticky_overload_factor,
                Some(f) if f.is_finite() && f >= 1.0 => f,
                Some(f) => {
                    return Err(invalid(
                        "sticky_overload_factor",
                        format!("must be a finite number >= 1 (got {f})"),
                    ))
                }
            },
            nats_url,
            publish_events,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_validation() {
        let c = KvConfig::from_sources(&KvCli::default(), &KvFile::default()).unwrap();
        assert_eq!(c, KvConfig::default());
        let cli = KvCli {
            no_predict: Some(true),
            temperature: Some(0.5),
            ..KvCli::default()
        };
        let file = KvFile {
            temperature: Some(2.0),
            kv_decode_weight: Some(0.5),
            ..KvFile::default()
        };
        let c = KvConfig::from_sources(&cli, &file).unwrap();
        assert!(!c.predict);
        assert_eq!(c.temperature, 0.5);
        assert_eq!(c.decode_weight, 0.5);
        let bad = KvCli {
            kv_prefill_weight: Some(-1.0),
            ..KvCli::default()
        };
        let e = KvConfig::from_sources(&bad, &KvFile::default()).unwrap_err();
        assert_eq!(e.field, "kv_prefill_weight");
        let relay = KvCli {
            publish_events: Some(true),
            ..KvCli::default()
        };
        let e = KvConfig::from_sources(&relay, &KvFile::default()).unwrap_err();
        assert_eq!(e.field, "publish_events");
    }
}
