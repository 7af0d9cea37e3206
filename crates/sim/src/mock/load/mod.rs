//! SGLang 0.5.23's load publisher (`--load-publish-endpoint`): where its per-rank PUB
//! sockets bind (`range`), the `LoadStat` payload (`stat`) and the per-rank task
//! (`publisher`). Off unless the flag is given, as in SGLang.

pub mod publisher;
pub mod range;
pub mod stat;

use std::sync::Arc;

use zeromq::{PubSocket, Socket};

use crate::mock::config::{KvEventsConfig, MockArgs};
use crate::mock::engine::RankHandle;
pub use range::LoadRange;

/// The load range for the KV-event configuration the mock reports (actual ports), with
/// SGLang's startup checks (`check_load_publish_args`, `arg_groups/validation_hook.py`):
/// an opted-in endpoint without an active KV publisher, or one the resolver declines, is
/// an error.
pub fn resolve_reported(
    reported_kv_config: Option<&str>,
    dp_size: usize,
    mode: Option<&str>,
) -> Result<Option<LoadRange>, String> {
    let m = mode.unwrap_or("").trim();
    if m.is_empty() || m.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let Some(raw) = reported_kv_config else {
        return Err(
            "--load-publish-endpoint requires --kv-events-config: routers discover \
                    the load range through /server_info's kv_events block, absent without a \
                    publisher."
                .into(),
        );
    };
    let cfg = KvEventsConfig::parse(raw)?;
    if !cfg.enabled() || cfg.endpoint.is_empty() {
        return Err(
            "--load-publish-endpoint needs an active --kv-events-config publisher; \
                    got publisher='null' or an empty endpoint."
                .into(),
        );
    }
    range::resolve(
        Some(&cfg.endpoint),
        cfg.replay_endpoint.as_deref(),
        dp_size,
        Some(m),
    )
}

/// The address the zeromq crate binds for rank `rank` (`*` means `--host`, as the mock's
/// KV-event sockets do).
fn bind_addr(range: &LoadRange, bind_host: &str, rank: usize) -> Result<String, String> {
    let port = usize::from(range.base) + rank;
    let port = u16::try_from(port).map_err(|_| format!("load port {port} out of range"))?;
    Ok(match range.host.as_str() {
        "*" => format!("tcp://{bind_host}:{port}"),
        "::" => format!("tcp://[::]:{port}"),
        h => format!("tcp://{h}:{port}"),
    })
}

/// Binds each rank's load socket and starts its task. A bind failure disables that rank's
/// feed with a warning, as SGLang's best-effort bind does (the range stays advertised).
pub async fn start(range: &LoadRange, args: &MockArgs, ranks: &[RankHandle]) {
    let heartbeat = publisher::heartbeat(args.speedup);
    for (r, handle) in ranks.iter().enumerate() {
        let addr = match bind_addr(range, &args.host, r) {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!("load-publisher disabled for rank {r}: {e}");
                continue;
            }
        };
        let mut socket = PubSocket::new();
        if let Err(e) = socket.bind(&addr).await {
            tracing::warn!(
                "load-publisher disabled: failed to bind the load socket at {addr}: {e}"
            );
            continue;
        }
        let c = publisher::RankConst {
            rank: handle.rank,
            max_total_num_tokens: args.max_total_tokens,
            max_running_requests: args.max_running(),
        };
        tokio::spawn(publisher::run(
            socket,
            Arc::downgrade(&handle.snapshot),
            c,
            heartbeat,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn startup_checks() {
        assert_eq!(resolve_reported(None, 1, None), Ok(None));
        assert_eq!(resolve_reported(None, 1, Some("off")), Ok(None));
        assert!(resolve_reported(None, 1, Some("auto")).is_err());
        assert!(resolve_reported(Some(r#"{"publisher":"null"}"#), 1, Some("auto")).is_err());
        let cfg =
            r#"{"publisher":"zmq","endpoint":"tcp://*:19001","replay_endpoint":"tcp://*:19002"}"#;
        assert_eq!(
            resolve_reported(Some(cfg), 1, Some("auto"))
                .unwrap()
                .unwrap()
                .base,
            19003
        );
        let range = LoadRange {
            host: "*".into(),
            base: 19003,
        };
        assert_eq!(
            bind_addr(&range, "127.0.0.1", 1).unwrap(),
            "tcp://127.0.0.1:19004"
        );
    }
}
