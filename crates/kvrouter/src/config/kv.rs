//! KV-mode settings: predict-on-route, cost weights, sticky overload rule, NATS feed.
//!
//! The options are declared once in [`KvOptions`] (flattened into [`super::Options`]); in the
//! `--config` file they live under a `[kv]` table with the same names (snake_case).
//! [`KvConfig`] is their validated form; validation names the offending field.

use std::time::Duration;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::{invalid, ConfigError};
use crate::events::runtime::FeedSettings;
pub use crate::routing::kv::settings::{KvConfig, PredictCredit};
use crate::routing::kv::{BlindSettings, TierCredits};

/// KV-mode options, flattened into [`super::Options`] (flags at top level, `[kv]` table in
/// the file). Each field is declared once: flag, `KVROUTER_*` variable, key and default.
#[derive(Debug, Clone, PartialEq, Args, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KvOptions {
    /// Seconds a routed request's blocks count as predicted-cached on its worker (predict-on-route); with `--predict-credit learned`, the upper bound of each unit's TTL, learned from how long its store events take to confirm predictions.
    #[arg(long, env = "KVROUTER_PREDICT_TTL_SECS", default_value_t = 10.0)]
    pub predict_ttl_secs: f64,
    /// How much a predicted block counts: `full` (every prediction counts in full for the TTL and is never at eviction risk) or `learned` (each unit's predictions weighed by the share its store events confirm, the TTL learned from their delay). See docs/kv-routing.md "Predictions".
    #[arg(long, env = "KVROUTER_PREDICT_CREDIT", value_enum, default_value_t = PredictCredit::Learned)]
    pub predict_credit: PredictCredit,
    /// Disable predict-on-route (score from KV events only).
    #[arg(long, env = "KVROUTER_NO_PREDICT", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub no_predict: bool,
    /// Cost per block of this request's new prefill (others' prefill in flight counts as their context, at the decode weight); a PD router (`--pd-disaggregation`) defaults to 4 for its prefill leg (docs/pd.md "Prefill weight").
    #[arg(long, env = "KVROUTER_KV_PREFILL_WEIGHT", default_value_t = 1.0)]
    pub kv_prefill_weight: f64,
    /// Cost per block of context held by requests in flight on the unit with another prompt (decode load).
    #[arg(long, env = "KVROUTER_KV_DECODE_WEIGHT", default_value_t = 0.125)]
    pub kv_decode_weight: f64,
    /// Cost per request in flight on the unit (queue depth).
    #[arg(long, env = "KVROUTER_KV_QUEUE_WEIGHT", default_value_t = 0.5)]
    pub kv_queue_weight: f64,
    /// Cost per block this request's prefill would evict from a full KV cache, as a multiple of the fleet's observed prefix reuse (the chance an evicted block is wanted again; 0 = off, see docs/kv-routing.md "KV pressure").
    #[arg(long, env = "KVROUTER_KV_EVICT_WEIGHT", default_value_t = 1.0)]
    pub kv_evict_weight: f64,
    /// Discount a unit's cached prefix by the blocks its engine is expected to evict before the request's prefill starts (eviction rate from KV events times the expected wait; see docs/kv-routing.md "KV pressure").
    #[arg(long, env = "KVROUTER_KV_EVICTION_RISK", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = true)]
    pub kv_eviction_risk: bool,
    /// Learn each unit's prefill and decode rates from its responses and scale its cost terms by its speed against the fleet (`--kv-learn-rates=false`: the block-count model only).
    #[arg(long, env = "KVROUTER_KV_LEARN_RATES", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = true)]
    pub kv_learn_rates: bool,
    /// A unit's learned speed counts only when it is more than this factor slower or faster than the fleet's reference (inside it the factor is 1, so homogeneous fleets route as the block-count model); a scaled unit returns to 1 inside (1 + this) / 2.
    #[arg(long, env = "KVROUTER_KV_RATE_TOLERANCE", default_value_t = 2.0)]
    pub kv_rate_tolerance: f64,
    /// A sticky key's worker keeps the request unless it costs more than this many prefill blocks above the best.
    #[arg(long, env = "KVROUTER_STICKY_SLACK_BLOCKS", default_value_t = 32.0)]
    pub sticky_slack_blocks: f64,
    /// A sticky key's worker is overloaded (and yields) when its cost exceeds this factor times the best cost, plus the slack.
    #[arg(long, env = "KVROUTER_STICKY_OVERLOAD_FACTOR", default_value_t = 2.0)]
    pub sticky_overload_factor: f64,
    /// A request is "blind" when the overlaps of the candidate units differ by less than this fraction of its blocks; it is then placed by rendezvous hashing of the prompt with bounded loads, so router replicas agree without talking (0 = off, the default: every request takes the cost model's pick; 0.5 for replicas behind one load balancer, see docs/kv-routing.md).
    #[arg(long, env = "KVROUTER_KV_BLIND_THRESHOLD", default_value_t = 0.0)]
    pub kv_blind_threshold: f64,
    /// A blind request goes to the first unit in its prompt's rendezvous order whose cost is at most this factor times the cheapest unit's (>= 1; the bound of consistent hashing with bounded loads).
    #[arg(long, env = "KVROUTER_KV_BALANCE_FACTOR", default_value_t = 1.25)]
    pub kv_balance_factor: f64,
    /// NATS server to consume KV events from (relayed SGLang batches and Dynamo RouterEvents), e.g. nats://127.0.0.1:4222.
    #[arg(long, env = "KVROUTER_NATS_URL")]
    pub nats_url: Option<String>,
    /// Republish the KV events read from worker ZMQ streams on NATS (needs --nats-url).
    #[arg(long, env = "KVROUTER_PUBLISH_EVENTS", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub publish_events: bool,
    /// Relay KV events through a JetStream stream (durable; a starting router rebuilds its index from it before it is ready) instead of core NATS; one relay per worker publishes (lock in a NATS KV bucket). Needs --nats-url.
    #[arg(long, env = "KVROUTER_NATS_JETSTREAM", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub nats_jetstream: bool,
    /// JetStream stream of relayed KV events (holds subjects `kvrouter.kv.>`); created if missing.
    #[arg(long, env = "KVROUTER_NATS_STREAM", default_value = "KVROUTER_KV")]
    pub nats_stream: String,
    /// Seconds the stream keeps a relayed batch (older ones are dropped).
    #[arg(
        long,
        env = "KVROUTER_NATS_STREAM_MAX_AGE_SECS",
        default_value_t = 3600.0
    )]
    pub nats_stream_max_age_secs: f64,
    /// Bytes the stream keeps at most (oldest batches dropped first); see docs/events.md for sizing.
    #[arg(
        long,
        env = "KVROUTER_NATS_STREAM_MAX_BYTES",
        default_value_t = 1_073_741_824
    )]
    pub nats_stream_max_bytes: u64,
    /// Seconds a relay's per-worker lock lives without a refresh: a standby relay takes a worker over this long after its relay died.
    #[arg(long, env = "KVROUTER_NATS_RELAY_LOCK_TTL_SECS", default_value_t = 5.0)]
    pub nats_relay_lock_ttl_secs: f64,
    /// With --nats-url: publish this router's predict-on-route bookings on NATS (subject `kvrouter.book`) and apply the other replicas' ones, so replicas behind one load balancer share predictions. `--share-predictions=false` turns it off.
    #[arg(long, env = "KVROUTER_SHARE_PREDICTIONS", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = true)]
    pub share_predictions: bool,
    /// NATS subject of Dynamo KV events (repeatable; wildcards allowed). Unset: Dynamo 1.6's endpoint-scoped `namespace.*.component.*.endpoint.*.kv-events` and the older `namespace.*.component.*.kv-events`. Needs --nats-url; Dynamo publishes on NATS only with `DYN_EVENT_PLANE=nats` (see docs/events.md).
    #[arg(long, env = "KVROUTER_DYNAMO_KV_SUBJECT", num_args = 0.., value_delimiter = ',', action = clap::ArgAction::Append)]
    pub dynamo_kv_subject: Vec<String>,
    /// Map a Dynamo worker (instance) id to the worker registered under URL, as `URL=ID` (repeatable; ID decimal or 0x hex). A worker's registration label `dynamo_worker_id` does the same.
    #[arg(long, env = "KVROUTER_DYNAMO_WORKER_ID", num_args = 0.., value_delimiter = ',', action = clap::ArgAction::Append)]
    pub dynamo_worker_id: Vec<String>,
    /// Dynamo ZMQ event-plane publisher to subscribe to, `tcp://HOST:PORT` (repeatable): Dynamo 1.6's default KV event transport (topic `kv-events`).
    #[arg(long, env = "KVROUTER_DYNAMO_ZMQ_ENDPOINT", num_args = 0.., value_delimiter = ',', action = clap::ArgAction::Append)]
    pub dynamo_zmq_endpoint: Vec<String>,
    /// What a prefix page found only in a lower cache tier (SGLang HiCache: host memory `CPU_PINNED`; storage `DISK` / `EXTERNAL`) is worth as a fraction of a GPU hit, as `host=F,disk=F` (each 0..=1; a part left out keeps its default; Dynamo's weights are the defaults). A tier credited 0 is not indexed; `off` ignores both (see docs/kv-routing.md "Cache tiers").
    #[arg(
        long,
        env = "KVROUTER_KV_TIER_CREDIT",
        default_value = "host=0.75,disk=0.25"
    )]
    pub kv_tier_credit: String,
    /// NATS credentials file (`.creds`: user JWT and NKey seed, NATS decentralized auth) the router connects with; the way to run the NATS event path on a shared network (docs/events.md). At most one of --nats-creds, --nats-nkey-seed-file, --nats-user, --nats-token.
    #[arg(long, env = "KVROUTER_NATS_CREDS")]
    pub nats_creds: Option<std::path::PathBuf>,
    /// File holding the NKey seed (`SU...`) of a NATS `nkey` user the router connects as.
    #[arg(long, env = "KVROUTER_NATS_NKEY_SEED_FILE")]
    pub nats_nkey_seed_file: Option<std::path::PathBuf>,
    /// NATS user name (with --nats-password, best given as KVROUTER_NATS_PASSWORD so it stays out of the process list).
    #[arg(long, env = "KVROUTER_NATS_USER")]
    pub nats_user: Option<String>,
    /// NATS password of --nats-user (never logged).
    #[arg(long, env = "KVROUTER_NATS_PASSWORD", hide_env_values = true)]
    pub nats_password: Option<String>,
    /// NATS authentication token (never logged; best given as KVROUTER_NATS_TOKEN).
    #[arg(long, env = "KVROUTER_NATS_TOKEN", hide_env_values = true)]
    pub nats_token: Option<String>,
    /// PEM root certificate(s) to trust for the NATS server; makes TLS required (use with a `tls://` URL).
    #[arg(long, env = "KVROUTER_NATS_TLS_CA")]
    pub nats_tls_ca: Option<std::path::PathBuf>,
}

impl Default for KvOptions {
    /// Every KV option at its declared default (environment not consulted).
    fn default() -> Self {
        super::declared::declared_defaults(KvOptions::augment_args(clap::Command::new("kv")))
            .expect("declared KV defaults parse")
    }
}

impl Default for KvConfig {
    /// The validated declared defaults of [`KvOptions`].
    fn default() -> Self {
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

/// `x` when it is a finite number >= 1 (a factor or a tolerance).
fn factor(field: &str, x: f64) -> Result<f64, ConfigError> {
    match x {
        f if f.is_finite() && f >= 1.0 => Ok(f),
        f => Err(invalid(
            field,
            format!("must be a finite number >= 1 (got {f})"),
        )),
    }
}

/// `t` when it is between 0 and 1.
fn fraction(field: &str, t: f64) -> Result<f64, ConfigError> {
    match t {
        t if (0.0..=1.0).contains(&t) => Ok(t),
        t => Err(invalid(
            field,
            format!("must be a fraction between 0 and 1 (got {t})"),
        )),
    }
}

/// `v` seconds when `v` is positive and under a million.
fn positive_secs(field: &str, v: f64) -> Result<Duration, ConfigError> {
    match v {
        v if v.is_finite() && v > 0.0 && v < 1e6 => Ok(Duration::from_secs_f64(v)),
        v => Err(invalid(
            field,
            format!("must be a positive number of seconds (got {v})"),
        )),
    }
}

/// `--nats-url`, refused when set but blank.
fn non_empty_nats_url(o: &KvOptions) -> Result<Option<String>, ConfigError> {
    match &o.nats_url {
        Some(u) if u.trim().is_empty() => Err(invalid("nats_url", "must not be empty when set")),
        u => Ok(u.clone()),
    }
}

impl KvConfig {
    /// Validates merged options (see [`super::Config::from_sources`] for the merge).
    pub fn from_options(o: &KvOptions) -> Result<KvConfig, ConfigError> {
        let predict_ttl = positive_secs("predict_ttl_secs", o.predict_ttl_secs)?;
        let (nats_url, nats_auth) = nats_auth(o, non_empty_nats_url(o)?)?;
        if o.publish_events && nats_url.is_none() {
            return Err(invalid("publish_events", "needs --nats-url"));
        }
        let jetstream = jetstream_config(o, nats_url.is_some())?;
        let dynamo = dynamo_settings(o, nats_url.is_some())?;
        Ok(KvConfig {
            predict: !o.no_predict,
            predict_ttl,
            predict_credit: o.predict_credit,
            prefill_weight: weight("kv_prefill_weight", o.kv_prefill_weight)?,
            decode_weight: weight("kv_decode_weight", o.kv_decode_weight)?,
            queue_weight: weight("kv_queue_weight", o.kv_queue_weight)?,
            evict_weight: weight("kv_evict_weight", o.kv_evict_weight)?,
            eviction_risk: o.kv_eviction_risk,
            learn_rates: o.kv_learn_rates,
            rate_tolerance: factor("kv_rate_tolerance", o.kv_rate_tolerance)?,
            sticky_slack_blocks: weight("sticky_slack_blocks", o.sticky_slack_blocks)?,
            sticky_overload_factor: factor("sticky_overload_factor", o.sticky_overload_factor)?,
            blind: BlindSettings {
                threshold: fraction("kv_blind_threshold", o.kv_blind_threshold)?,
                balance_factor: factor("kv_balance_factor", o.kv_balance_factor)?,
            },
            share_predictions: o.share_predictions && !o.no_predict && nats_url.is_some(),
            feed: FeedSettings {
                publish_events: o.publish_events,
                nats_url,
                nats_auth,
                jetstream,
                dynamo,
            },
            tier_credit: TierCredits::parse(&o.kv_tier_credit)
                .map_err(|e| invalid("kv_tier_credit", e))?,
        })
    }
}

/// The NATS URL without credentials and how to authenticate (flags, or `user:pass@` / `token@`
/// in the URL): at most one kind of credentials, each needing --nats-url.
fn nats_auth(
    o: &KvOptions,
    url: Option<String>,
) -> Result<(Option<String>, crate::events::nats_auth::NatsAuth), ConfigError> {
    use crate::events::nats_auth::{NatsAuth, NatsCredentials, Secret};
    let (url, in_url) = match url {
        Some(u) => {
            let (clean, c) = NatsAuth::split_url(&u);
            (Some(clean), c)
        }
        None => (None, NatsCredentials::None),
    };
    if o.nats_password.is_some() && o.nats_user.is_none() {
        return Err(invalid("nats_password", "needs --nats-user"));
    }
    let mut given: Vec<(&str, NatsCredentials)> = Vec::new();
    if let Some(p) = &o.nats_creds {
        given.push(("nats_creds", NatsCredentials::CredsFile(p.clone())));
    }
    if let Some(p) = &o.nats_nkey_seed_file {
        given.push((
            "nats_nkey_seed_file",
            NatsCredentials::NkeySeedFile(p.clone()),
        ));
    }
    if let Some(user) = &o.nats_user {
        let Some(password) = &o.nats_password else {
            return Err(invalid(
                "nats_user",
                "needs --nats-password (or KVROUTER_NATS_PASSWORD)",
            ));
        };
        given.push((
            "nats_user",
            NatsCredentials::UserPassword {
                user: user.clone(),
                password: Secret::new(password.clone()),
            },
        ));
    }
    if let Some(t) = &o.nats_token {
        given.push(("nats_token", NatsCredentials::Token(Secret::new(t.clone()))));
    }
    if in_url != NatsCredentials::None {
        given.push(("nats_url", in_url));
    }
    if given.len() > 1 {
        let names: Vec<&str> = given.iter().map(|(n, _)| *n).collect();
        return Err(invalid(
            names[1],
            format!(
                "give one kind of NATS credentials, not {}",
                names.join(" and ")
            ),
        ));
    }
    if let Some((name, _)) = given.first() {
        if url.is_none() {
            return Err(invalid(name, "needs --nats-url"));
        }
    }
    if o.nats_tls_ca.is_some() && url.is_none() {
        return Err(invalid("nats_tls_ca", "needs --nats-url"));
    }
    let auth = NatsAuth {
        credentials: given.pop().map(|(_, c)| c).unwrap_or_default(),
        tls_ca: o.nats_tls_ca.clone(),
    };
    Ok((url, auth))
}

/// The `--dynamo-*` settings.
fn dynamo_settings(
    o: &KvOptions,
    has_nats: bool,
) -> Result<crate::events::dynamo_map::DynamoSettings, ConfigError> {
    if !o.dynamo_kv_subject.is_empty() && !has_nats {
        return Err(invalid("dynamo_kv_subject", "needs --nats-url"));
    }
    crate::events::dynamo_map::DynamoSettings::parse(
        &o.dynamo_kv_subject,
        &o.dynamo_worker_id,
        &o.dynamo_zmq_endpoint,
    )
    .map_err(|(field, message)| invalid(field, message))
}

/// The JetStream settings when `--nats-jetstream` is on.
fn jetstream_config(
    o: &KvOptions,
    has_nats: bool,
) -> Result<Option<crate::events::JetStreamConfig>, ConfigError> {
    if !o.nats_jetstream {
        return Ok(None);
    }
    if !has_nats {
        return Err(invalid("nats_jetstream", "needs --nats-url"));
    }
    let name = o.nats_stream.trim();
    if name.is_empty() || name.contains(['.', '*', '>', ' ', '/', '\\']) {
        return Err(invalid(
            "nats_stream",
            "must be a JetStream stream name (no '.', '*', '>', spaces or slashes)",
        ));
    }
    let seconds = |field: &str, v: f64, min: f64| match v {
        v if v.is_finite() && v >= min && v < 1e9 => Ok(Duration::from_secs_f64(v)),
        v => Err(invalid(
            field,
            format!("must be a number of seconds >= {min} (got {v})"),
        )),
    };
    let max_bytes = match i64::try_from(o.nats_stream_max_bytes) {
        Ok(b) if b >= 1024 => b,
        _ => {
            return Err(invalid(
                "nats_stream_max_bytes",
                "must be between 1024 and 2^63-1",
            ))
        }
    };
    Ok(Some(crate::events::JetStreamConfig {
        stream: name.to_owned(),
        max_age: seconds("nats_stream_max_age_secs", o.nats_stream_max_age_secs, 1.0)?,
        max_bytes,
        lock_ttl: seconds("nats_relay_lock_ttl_secs", o.nats_relay_lock_ttl_secs, 0.3)?,
        ..crate::events::JetStreamConfig::new()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_validation() {
        let d = KvConfig::default();
        assert!(d.predict);
        assert_eq!(d.prefill_weight, 1.0);
        assert_eq!(d.decode_weight, 1.0 / 8.0);
        assert_eq!(d.queue_weight, 0.5);
        assert_eq!(d.predict_ttl, Duration::from_secs(10));
        let o = KvOptions {
            no_predict: true,
            ..KvOptions::default()
        };
        let c = KvConfig::from_options(&o).unwrap();
        assert!(!c.predict);
        let bad = KvOptions {
            kv_prefill_weight: -1.0,
            ..KvOptions::default()
        };
        let e = KvConfig::from_options(&bad).unwrap_err();
        assert_eq!(e.field, "kv_prefill_weight");
        let relay = KvOptions {
            publish_events: true,
            ..KvOptions::default()
        };
        let e = KvConfig::from_options(&relay).unwrap_err();
        assert_eq!(e.field, "publish_events");
        assert_eq!(d.feed.jetstream, None);
        assert_eq!((d.learn_rates, d.rate_tolerance), (true, 2.0));
        let tol = KvOptions {
            kv_rate_tolerance: 0.9,
            ..KvOptions::default()
        };
        let e = KvConfig::from_options(&tol).unwrap_err();
        assert_eq!(e.field, "kv_rate_tolerance");
    }

    #[test]
    fn blind_settings_are_validated() {
        let d = KvConfig::default().blind;
        assert_eq!((d.threshold, d.balance_factor), (0.0, 1.25));
        let on = KvOptions {
            kv_blind_threshold: 0.5,
            ..KvOptions::default()
        };
        assert_eq!(KvConfig::from_options(&on).unwrap().blind.threshold, 0.5);
        for (o, field) in [
            (
                KvOptions {
                    kv_blind_threshold: 1.5,
                    ..KvOptions::default()
                },
                "kv_blind_threshold",
            ),
            (
                KvOptions {
                    kv_blind_threshold: f64::NAN,
                    ..KvOptions::default()
                },
                "kv_blind_threshold",
            ),
            (
                KvOptions {
                    kv_balance_factor: 0.9,
                    ..KvOptions::default()
                },
                "kv_balance_factor",
            ),
            (
                KvOptions {
                    kv_balance_factor: f64::INFINITY,
                    ..KvOptions::default()
                },
                "kv_balance_factor",
            ),
        ] {
            assert_eq!(KvConfig::from_options(&o).unwrap_err().field, field);
        }
    }

    #[test]
    fn share_predictions_needs_nats_and_prediction() {
        assert!(!KvConfig::default().share_predictions);
        let nats = KvOptions {
            nats_url: Some("nats://127.0.0.1:4222".into()),
            ..KvOptions::default()
        };
        assert!(KvConfig::from_options(&nats).unwrap().share_predictions);
        for off in [
            KvOptions {
                share_predictions: false,
                ..nats.clone()
            },
            KvOptions {
                no_predict: true,
                ..nats.clone()
            },
        ] {
            assert!(!KvConfig::from_options(&off).unwrap().share_predictions);
        }
    }

    #[test]
    fn tier_credit_defaults_to_dynamo_and_is_validated() {
        use crate::routing::kv::TierCredits;
        assert_eq!(KvConfig::default().tier_credit, TierCredits::DEFAULT);
        let off = KvOptions {
            kv_tier_credit: "host=0,disk=0".into(),
            ..KvOptions::default()
        };
        assert_eq!(
            KvConfig::from_options(&off).unwrap().tier_credit,
            TierCredits::OFF
        );
        for bad in ["host=1.2", "ram=0.5", "host:0.5"] {
            let o = KvOptions {
                kv_tier_credit: bad.into(),
                ..KvOptions::default()
            };
            let e = KvConfig::from_options(&o).unwrap_err();
            assert_eq!(e.field, "kv_tier_credit", "{bad}");
        }
    }

    #[test]
    fn jetstream_settings() {
        let js = KvOptions {
            nats_url: Some("nats://127.0.0.1:4222".into()),
            nats_jetstream: true,
            nats_relay_lock_ttl_secs: 2.0,
            ..KvOptions::default()
        };
        let c = KvConfig::from_options(&js).unwrap().feed.jetstream.unwrap();
        assert_eq!(c.stream, "KVROUTER_KV");
        assert_eq!(c.prefix, "kvrouter.kv");
        assert_eq!(c.max_age, Duration::from_secs(3600));
        assert_eq!(c.max_bytes, 1 << 30);
        assert_eq!(c.lock_ttl, Duration::from_secs(2));
        let no_nats = KvOptions {
            nats_url: None,
            ..js.clone()
        };
        assert_eq!(
            KvConfig::from_options(&no_nats).unwrap_err().field,
            "nats_jetstream"
        );
        let bad_name = KvOptions {
            nats_stream: "a.b".into(),
            ..js.clone()
        };
        assert_eq!(
            KvConfig::from_options(&bad_name).unwrap_err().field,
            "nats_stream"
        );
        let bad_ttl = KvOptions {
            nats_relay_lock_ttl_secs: 0.0,
            ..js
        };
        assert_eq!(
            KvConfig::from_options(&bad_ttl).unwrap_err().field,
            "nats_relay_lock_ttl_secs"
        );
    }
}
