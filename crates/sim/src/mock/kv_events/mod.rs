//! KV events in SGLang's wire format: msgpack encoding, endpoint rules and the per-rank
//! ZMQ PUB + ROUTER replay publisher.

pub mod coalesce;
pub mod encode;
pub mod endpoint;
pub mod publisher;

pub use crate::mock::config::EventFormat;
use endpoint::Endpoint;
pub use publisher::PublisherHandle;

use crate::mock::config::KvEventsConfig;

/// Publishers of every DP rank plus the configuration JSON to report in `/server_info`
/// (with the actual rank-0 ports when the user asked for port 0).
pub struct Publishers {
    pub per_rank: Vec<PublisherHandle>,
    pub reported_config: Option<String>,
}

/// Opens the sockets of every rank (or nothing when `publisher` is `"null"`).
///
/// With port 0 the rank-0 socket binds an ephemeral port `P` and rank `r` then binds
/// `P + r` (SGLang's rule), retrying with a new `P` when a port is taken.
pub async fn start(
    cfg: Option<&KvEventsConfig>,
    raw_json: Option<&str>,
    bind_host: &str,
    dp_size: usize,
    format: EventFormat,
) -> Result<Publishers, String> {
    let Some(cfg) = cfg.filter(|c| c.enabled()) else {
        return Ok(Publishers {
            per_rank: vec![PublisherHandle::disabled(); dp_size],
            reported_config: raw_json.map(str::to_string),
        });
    };
    let pub_ep = Endpoint::parse(&cfg.endpoint)?;
    let replay_ep = cfg
        .replay_endpoint
        .as_deref()
        .map(Endpoint::parse)
        .transpose()?;
    let mut last_err = String::new();
    for _attempt in 0..20 {
        match open_all(&pub_ep, replay_ep.as_ref(), bind_host, dp_size, cfg.bind).await {
            Ok((sockets, pub0, replay0)) => {
                let per_rank = sockets
                    .into_iter()
                    .map(|s| publisher::spawn(s, cfg.topic.clone(), cfg.buffer_steps, format))
                    .collect();
                let mut reported: serde_json::Value = raw_json
                    .and_then(|j| serde_json::from_str(j).ok())
                    .unwrap_or_else(|| serde_json::json!({}));
                if let Some(obj) = reported.as_object_mut() {
                    obj.insert("endpoint".into(), pub0.display().into());
                    if let Some(r) = replay0 {
                        obj.insert("replay_endpoint".into(), r.display().into());
                    }
                }
                return Ok(Publishers {
                    per_rank,
                    reported_config: Some(reported.to_string()),
                });
            }
            Err(e) => last_err = e,
        }
    }
    Err(format!("cannot open KV-event sockets: {last_err}"))
}

type Opened = (Vec<publisher::RankSockets>, Endpoint, Option<Endpoint>);

async fn open_all(
    pub_ep: &Endpoint,
    replay_ep: Option<&Endpoint>,
    host: &str,
    dp: usize,
    bind: Option<bool>,
) -> Result<Opened, String> {
    let mut sockets = Vec::with_capacity(dp);
    let mut pub_base = pub_ep.port();
    let mut replay_base = replay_ep.map(Endpoint::port).unwrap_or(0);
    let mut pub0 = pub_ep.clone();
    let mut replay0 = replay_ep.cloned();
    for rank in 0..dp {
        let rank_ep = pub_ep.for_rank(rank, pub_base)?;
        let binds = rank_ep.binds_with(bind);
        let connect_to = (!binds).then(|| rank_ep.socket_addr(host));
        let (pub_socket, actual) = publisher::open_pub(&rank_ep, host, binds).await?;
        if rank == 0 {
            pub_base = actual.port();
            pub0 = actual;
        }
        let replay = match replay_ep {
            Some(ep) => {
                let (s, actual) =
                    publisher::open_replay(&ep.for_rank(rank, replay_base)?, host).await?;
                if rank == 0 {
                    replay_base = actual.port();
                    replay0 = Some(actual);
                }
                Some(s)
            }
            None => None,
        };
        sockets.push(publisher::RankSockets {
            pub_socket,
            connect_to,
            replay,
        });
    }
    Ok((sockets, pub0, replay0))
}
