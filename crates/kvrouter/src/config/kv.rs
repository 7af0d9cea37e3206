//! KV-mode settings: predict-on-route (TTL, confirmation window), temperature, NATS feed.
//!
//! The options are declared once in [`KvOptions`] (flattened into [`super::Options`]); in the
//! `--config` file they live under a `[kv]` table with the same names (snake_case).
//! [`KvConfig`] is their validated form; validation names the offending field.

use std::time::Duration;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::{invalid, ConfigError};

/// KV-mode options, flattened into [`super::Options`] (flags at top level, `[kv]` table in
/// the file). Each field is declared once: flag, `KVROUTER_*` variable, key and default.
#[derive(Debug, Clone, PartialEq, Args, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KvOptions {
    /// Seconds a routed request's blocks count as predicted-cached on its worker (predict-on-route).
    #[arg(long, env = "KVROUTER_PREDICT_TTL_SECS", default_value_t = 10.0)]
    pub predict_ttl_secs: f64,
    /// Disable predict-on-route (score from KV events only).
    #[arg(long, env = "KVROUTER_NO_PREDICT", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub no_predict: bool,
    /// Seconds after a streamed request's first token (or its expected one) within which a KV event must confirm its predicted blocks; unconfirmed predictions stop counting.
    #[arg(long, env = "KVROUTER_PREDICT_CONFIRM_SECS", default_value_t = 1.0)]
    pub predict_confirm_secs: f64,
    /// Softmax temperature over costs (0 = always the cheapest).
    #[arg(long, env = "KVROUTER_TEMPERATURE", default_value_t = 0.0)]
    pub temperature: f64,
    /// NATS server to consume KV events from (relayed SGLang batches and Dynamo RouterEvents), e.g. nats://127.0.0.1:4222.
    #[arg(long, env = "KVROUTER_NATS_URL")]
    pub nats_url: Option<String>,
    /// Republish the KV events read from worker ZMQ streams on NATS (needs --nats-url).
    #[arg(long, env = "KVROUTER_PUBLISH_EVENTS", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub publish_events: bool,
}

impl Default for KvOptions {
    /// Every KV option at its declared default (environment not consulted).
    fn default() -> Self {
        #[allow(clippy::expect_used)]
        super::options::declared_defaults(KvOptions::augment_args(clap::Command::new("kv")))
            .expect("declared KV defaults parse")
    }
}

/// Validated KV-mode settings.
#[derive(Debug, Clone, PartialEq)]
pub struct KvConfig {
    /// Predict-on-route on (`--no-predict` turns it off).
    pub predict: bool,
    pub predict_ttl: Duration,
    pub predict_confirm: Duration,
    pub temperature: f64,
    pub nats_url: Option<String>,
    pub publish_events: bool,
}

impl Default for KvConfig {
    /// The validated declared defaults of [`KvOptions`].
    fn default() -> Self {
        #[allow(clippy::expect_used)]
        KvConfig::from_options(&KvOptions::default()).expect("declared KV defaults are valid")
    }
}

fn weight(field: &str, x: f64) -> Result<f64, ConfigError> {
    match x {
        x if x.is_finite() && x >= 0.0 => Ok(x),
        x => Err(invalid(
            field,
            format!("must be a finite number >= 0 (got {x})"),
        )),
    }
}

impl KvConfig {
    /// Validates merged options (see [`super::Config::from_sources`] for the merge).
    pub fn from_options(o: &KvOptions) -> Result<KvConfig, ConfigError> {
        let predict_ttl = match o.predict_ttl_secs {
            v if v.is_finite() && v > 0.0 && v < 1e6 => Duration::from_secs_f64(v),
            v => {
                return Err(invalid(
                    "predict_ttl_secs",
                    format!("must be a positive number of seconds (got {v})"),
                ))
            }
        };
        let nats_url = match &o.nats_url {
            Some(u) if u.trim().is_empty() => {
                return Err(invalid("nats_url", "must not be empty when set"))
            }
            u => u.clone(),
        };
        if o.publish_events && nats_url.is_none() {
            return Err(invalid("publish_events", "needs --nats-url"));
        }
        Ok(KvConfig {
            predict: !o.no_predict,
            predict_ttl,
            predict_confirm: match o.predict_confirm_secs {
                v if v.is_finite() && v > 0.0 && v < 1e6 => Duration::from_secs_f64(v),
                v => {
                    return Err(invalid(
                        "predict_confirm_secs",
                        format!("must be a positive number of seconds (got {v})"),
                    ))
                }
            },
            temperature: weight("temperature", o.temperature)?,
            nats_url,
            publish_events: o.publish_events,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_validation() {
        let d = KvConfig::default();
        assert!(d.predict);
        assert_eq!(d.predict_confirm, Duration::from_secs(1));
        assert_eq!(d.predict_ttl, Duration::from_secs(10));
        let o = KvOptions {
            no_predict: true,
            temperature: 0.5,
            ..KvOptions::default()
        };
        let c = KvConfig::from_options(&o).unwrap();
        assert!(!c.predict);
        assert_eq!(c.temperature, 0.5);
        let bad = KvOptions {
            temperature: -1.0,
            ..KvOptions::default()
        };
        let e = KvConfig::from_options(&bad).unwrap_err();
        assert_eq!(e.field, "temperature");
        let bad = KvOptions {
            predict_confirm_secs: 0.0,
            ..KvOptions::default()
        };
        let e = KvConfig::from_options(&bad).unwrap_err();
        assert_eq!(e.field, "predict_confirm_secs");
        let relay = KvOptions {
            publish_events: true,
            ..KvOptions::default()
        };
        let e = KvConfig::from_options(&relay).unwrap_err();
        assert_eq!(e.field, "publish_events");
    }
}
