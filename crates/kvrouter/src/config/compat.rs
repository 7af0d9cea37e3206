//! The sgl-router 0.3.2 / SMG 1.13 launch flags, in one table ([`PEER_FLAGS`]) of three kinds.
//!
//! miles, slime and NeMo-RL launch sgl-router (SMG) with their own command lines. So that such a
//! command line starts `router` unchanged, or fails saying why, every peer option string is here:
//! - [`Kind::Same`]: the peer's name for a kvrouter option; a flag of another name becomes a
//!   visible clap alias of it (`--log-json` = `--json-log`), one of the same name is that option.
//! - [`Kind::Ignored`]: parsed (its value or values consumed, as the peer takes them) and
//!   dropped; the router logs ONE warning line per flag at start naming what to use instead.
//! - [`Kind::Refused`]: parsed the same way, then an error (exit 2) naming why and what to use
//!   instead: ignoring it would route wrongly or drop a security or serving feature silently
//!   (EPD disaggregation, service discovery, TLS, JWT, mesh).
//!
//! The option strings come from the peers' wheels (`scripts/peer-flags.py` writes
//! `tests/data/peer-flags/*.txt`); `tests/config/peer_flag_table.rs` walks them against this table and
//! checks the table in docs/migration.md ([`markdown_table`]) matches it.

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Arg, ArgAction, ArgMatches, Command};

/// How many values a peer flag takes (as the peer's argparse declares it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// A switch (`--disable-circuit-breaker`).
    Nothing,
    /// Exactly one value (`--cache-threshold 0.3`).
    One,
    /// One or more values (`--prefill URL [PORT]`, `--selector a=b c=d`).
    Many,
    /// Zero or more values (`--cors-allowed-origins [a b]`).
    Any,
}

/// What kvrouter does with a peer flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The kvrouter option it is (snake_case id, as in the TOML file).
    Same(&'static str),
    /// Accepted and dropped; what kvrouter does instead (named in the warning).
    Ignored(&'static str),
    /// An error; why, and what to use instead.
    Refused(&'static str),
}

/// One sgl-router / SMG option string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerFlag {
    /// The long flag, without `--`.
    pub flag: &'static str,
    pub takes: Takes,
    pub kind: Kind,
}

const fn same(flag: &'static str, takes: Takes, ours: &'static str) -> PeerFlag {
    PeerFlag {
        flag,
        takes,
        kind: Kind::Same(ours),
    }
}
const fn ignored(flag: &'static str, takes: Takes, instead: &'static str) -> PeerFlag {
    PeerFlag {
        flag,
        takes,
        kind: Kind::Ignored(instead),
    }
}
const fn refused(flag: &'static str, takes: Takes, why: &'static str) -> PeerFlag {
    PeerFlag {
        flag,
        takes,
        kind: Kind::Refused(why),
    }
}

use Takes::{Any, Many, Nothing, One};

const KV_COST: &str =
    "KV cost weights --kv-prefill-weight/--kv-decode-weight/--kv-queue-weight in --mode kv";
const LOAD: &str = "--mode kv/least-load balance by load; no separate threshold";
const INDEX: &str = "none: the KV index follows worker KV events (no approximate tree to evict)";
const STALL: &str = "--stream-idle-timeout-secs (stalled requests to unhealthy workers are aborted) and the health checks";
const NO_TOKENIZER: &str = "none: kvrouter forwards the request unchanged (it tokenizes text only for routing, with --model-path / --tokenizer-path)";
const TOKENIZER_CACHE: &str = "--tokenizer-cache-mb (the per-session tokenization cache, in MiB)";
const ADMISSION: &str = "--max-concurrent-requests/--queue-size/--queue-timeout-secs (a concurrency limit with a bounded queue; no token-bucket rate)";
const TENANTS: &str =
    "none: no tenants (one --api-key for the data plane, --admin-api-key for admin routes)";
const STORAGE: &str =
    "none: no conversation or response storage (requests go to the workers unchanged)";
const MULTIMODAL: &str = "none: SGLang HTTP workers fetch and process media themselves";
const NO_OTEL: &str = "none: no OpenTelemetry export (logs and /metrics)";
const DISCOVERY_KNOB: &str = "none: only Kubernetes / file discovery reads it, which kvrouter refuses (etcd discovery: --etcd-endpoints, docs/discovery.md)";
const EPD: &str = "EPD (encode-prefill-decode) disaggregation is not supported: keep SMG in front of an encode fleet; kvrouter serves PD (--pd-disaggregation --prefill/--decode, docs/pd.md)";
const PD_ADMISSION: &str = "--max-concurrent-requests/--queue-size (no per-leg admission in PD mode; the decode leg is chosen by load)";
const DISCOVERY: &str = "Kubernetes / file service discovery is not supported: use etcd discovery (--etcd-endpoints with `router register` beside each worker, docs/discovery.md) or --worker-urls / POST /workers";
const SERVER_TLS: &str =
    "kvrouter serves plain HTTP: terminate TLS in front of it (ingress, proxy or sidecar)";
const WORKER_TLS: &str =
    "kvrouter calls workers over plain HTTP (no mTLS): put the TLS in a sidecar beside each worker";
const JWT: &str = "no JWT / OIDC authentication: use the bearer keys --api-key (data plane) and --admin-api-key (admin routes)";
const MESH: &str = "no mesh between routers: replicas find the workers through etcd discovery (--etcd-endpoints) and share routing predictions over NATS (--nats-url, --share-predictions), docs/discovery.md and docs/events.md";

/// Every sgl-router 0.3.2 / SMG 1.13 option string (and older sgl-router ones), by topic.
#[rustfmt::skip]
pub const PEER_FLAGS: &[PeerFlag] = &[
    // Server and workers.
    same("host", One, "host"),
    same("port", One, "port"),
    same("worker-urls", Any, "worker_urls"),
    same("api-key", One, "api_key"),
    same("max-payload-size", One, "max_payload_size"),
    same("request-timeout-secs", One, "request_timeout_secs"),
    same("shutdown-grace-period-secs", One, "shutdown_grace_period_secs"),
    same("header-read-timeout-secs", One, "header_read_timeout_secs"),
    same("stream-body-stall-timeout-secs", One, "body_read_timeout_secs"),
    same("upstream-pool-idle-timeout-secs", One, "worker_idle_timeout_secs"),
    ignored("idle-connection-timeout-secs", One, "--header-read-timeout-secs (also bounds an idle keep-alive connection)"),
    ignored("max-buffered-request-bytes", One, "--max-payload-size (every request body is held whole until it is sent)"),
    ignored("sse-keepalive-secs", One, "none: streams are relayed byte-exact from the worker"),
    ignored("upstream-http2", Nothing, "none: HTTP/1.1 to workers"),
    refused("health-check-port", One, "no separate probe port: /health, /liveness and /readiness are served on --port (and /metrics also on --prometheus-port)"),
    ignored("enable-igw", Nothing, "none: one model per router"),
    ignored("mini-lb", Nothing, "none"),
    ignored("backend", One, "SGLang HTTP workers only"),
    ignored("zmq-engine-count", One, "none: workers are SGLang HTTP servers"),
    ignored("enable-rl", Nothing, "none needed: /v1/rl/* is always served"),
    ignored("rl-control-timeout-secs", One, "--request-timeout-secs"),
    ignored("rl-fanout-concurrency", One, "none: fan-outs call every worker at once"),
    // Routing policy.
    same("policy", One, "policy"),
    same("block-size", One, "page_size"),
    same("dp-aware", Nothing, "dp_aware"),
    same("max-idle-secs", One, "sticky_ttl_secs"),
    same("sticky-key-idle-secs", One, "sticky_ttl_secs"),
    ignored("cache-threshold", One, KV_COST),
    ignored("cache-match-threshold", One, KV_COST),
    ignored("max-tree-size", One, KV_COST),
    ignored("prefix-token-count", One, KV_COST),
    ignored("prefix-hash-load-factor", One, KV_COST),
    ignored("prefix-hash-balance-abs-threshold", One, LOAD),
    ignored("overlap-decay", One, KV_COST),
    ignored("selection-policy", One, KV_COST),
    ignored("selection-temperature", One, "none: --mode kv picks the lowest cost (no sampling)"),
    ignored("selection-accounting-ttl-ms", One, "--predict-ttl-secs (predicted blocks of a routed request, in seconds)"),
    ignored("kv-index", One, "none: kvrouter's own block index"),
    ignored("cache-boundaries", One, KV_COST),
    ignored("cache-index", One, INDEX),
    ignored("cache-ttl-secs", One, INDEX),
    ignored("eviction-interval", One, INDEX),
    ignored("eviction-interval-secs", One, INDEX),
    ignored("balance-abs-threshold", One, LOAD),
    ignored("spill-abs-threshold", One, LOAD),
    ignored("balance-rel-threshold", One, LOAD),
    ignored("spill-rel-threshold", One, LOAD),
    ignored("balance-token-usage-threshold", One, LOAD),
    ignored("overload-token-usage-threshold", One, LOAD),
    ignored("bucket-adjust-interval-secs", One, LOAD),
    ignored("least-load-kv-pressure-weight", One, LOAD),
    ignored("least-load-default-throughput", One, LOAD),
    ignored("least-load-mean-prefill-tokens", One, LOAD),
    ignored("least-load-max-waiting-requests", One, LOAD),
    ignored("power-of-two-load-metric", One, LOAD),
    ignored("load-monitor-interval", One, LOAD),
    ignored("disable-load-monitoring", Nothing, LOAD),
    ignored("worker-overload-waiting-requests", One, LOAD),
    ignored("worker-overload-token-usage", One, LOAD),
    ignored("worker-overload-protection", Nothing, LOAD),
    ignored("disable-worker-overload-protection", Nothing, LOAD),
    ignored("worker-overload-shed", Nothing, "--max-concurrent-requests/--queue-size (429 beyond)"),
    ignored("worker-stall-secs", One, STALL),
    ignored("worker-wedge-secs", One, STALL),
    ignored("worker-stale-secs", One, STALL),
    ignored("worker-warmup-secs", One, KV_COST),
    ignored("worker-warmup-share", One, KV_COST),
    ignored("worker-warmup-blocks", One, KV_COST),
    ignored("worker-warmup-thin-ratio", One, KV_COST),
    ignored("worker-warmup-divert-every", One, KV_COST),
    ignored("assignment-mode", One, "new X-SMG-Routing-Key keys are placed by --mode (least-load for manual/consistent_hashing)"),
    ignored("routing-key-override", Nothing, "none needed: an X-SMG-Routing-Key request always stays on its worker"),
    ignored("sticky-sessions", Nothing, "none needed: an X-SMG-Routing-Key request always stays on its worker"),
    ignored("routing-key-headers", Any, "X-SMG-Routing-Key is the sticky header"),
    ignored("dp-minimum-tokens-scheduler", Nothing, "none: the router picks the DP rank by its own load count"),
    // PD / EPD disaggregation.
    same("pd-disaggregation", Nothing, "pd_disaggregation"),
    refused("epd-disaggregation", Nothing, EPD),
    same("prefill", Many, "prefill"),
    same("decode", One, "decode"),
    refused("encode", Many, EPD),
    same("prefill-policy", One, "prefill_policy"),
    same("decode-policy", One, "decode_policy"),
    refused("encode-policy", One, EPD),
    ignored("prefill-max-inflight-requests-per-worker", One, PD_ADMISSION),
    ignored("prefill-queue-size", One, PD_ADMISSION),
    ignored("prefill-queue-timeout-secs", One, PD_ADMISSION),
    ignored("pd-admission-wait-secs", One, PD_ADMISSION),
    // Worker registration and health.
    same("worker-startup-timeout-secs", One, "worker_startup_timeout_secs"),
    same("health-failure-threshold", One, "health_failure_threshold"),
    same("health-success-threshold", One, "health_success_threshold"),
    same("health-check-timeout-secs", One, "health_check_timeout_secs"),
    same("health-check-interval-secs", One, "health_check_interval_secs"),
    same("health-check-endpoint", One, "health_check_endpoint"),
    ignored("worker-startup-delay", One, "none: the first probe is sent at registration"),
    ignored("worker-startup-check-interval", One, "--health-check-interval-secs"),
    ignored("disable-health-check", Nothing, "none: health checks always run (tune --health-check-interval-secs)"),
    ignored("remove-unhealthy-workers", Nothing, "none: an unhealthy worker stays registered and returns after --health-success-threshold good checks"),
    ignored("no-remove-unhealthy-workers", Nothing, "none: an unhealthy worker stays registered and returns after --health-success-threshold good checks"),
    ignored("worker-auto-recovery", Nothing, "none: an unhealthy worker stays registered and returns after --health-success-threshold good checks"),
    ignored("no-worker-auto-recovery", Nothing, "none: an unhealthy worker stays registered and returns after --health-success-threshold good checks"),
    ignored("job-queue-capacity", One, "none: registrations run as bounded background jobs"),
    ignored("job-queue-concurrency", One, "none: registrations run as bounded background jobs"),
    // Retries and circuit breaker.
    same("retry-max-retries", One, "retry_max_retries"),
    same("retry-initial-backoff-ms", One, "retry_initial_backoff_ms"),
    same("retry-max-backoff-ms", One, "retry_max_backoff_ms"),
    same("disable-retries", Nothing, "disable_retries"),
    same("retry-backoff-multiplier", One, "retry_backoff_multiplier"),
    same("retry-jitter-factor", One, "retry_jitter_factor"),
    same("cb-failure-threshold", One, "cb_failure_threshold"),
    same("cb-success-threshold", One, "cb_success_threshold"),
    same("cb-timeout-duration-secs", One, "cb_timeout_duration_secs"),
    same("cb-window-duration-secs", One, "cb_window_duration_secs"),
    same("disable-circuit-breaker", Nothing, "disable_circuit_breaker"),
    // Admission.
    same("max-concurrent-requests", One, "max_concurrent_requests"),
    same("queue-size", One, "queue_size"),
    same("queue-timeout-secs", One, "queue_timeout_secs"),
    ignored("rate-limit-tokens-per-second", One, ADMISSION),
    ignored("max-background-responses", One, "none: no background Responses API mode (requests go to the workers)"),
    ignored("priority-scheduler-enabled", Nothing, ADMISSION),
    ignored("priority-scheduler-default-max-class", One, ADMISSION),
    ignored("priority-scheduler-config", One, ADMISSION),
    ignored("priority-scheduler-tenant-metric-top-n", One, ADMISSION),
    ignored("tenant-rate-limit-enabled", Nothing, ADMISSION),
    ignored("tenant-rate-limit-config", One, ADMISSION),
    // Service discovery.
    refused("service-discovery", Nothing, DISCOVERY),
    refused("discovery-provider", One, DISCOVERY),
    refused("discovery-file", One, DISCOVERY),
    refused("selector", Many, DISCOVERY),
    refused("prefill-selector", Many, DISCOVERY),
    refused("decode-selector", Many, DISCOVERY),
    refused("encode-selector", Many, DISCOVERY),
    ignored("discovery-check-interval-secs", One, DISCOVERY_KNOB),
    ignored("service-discovery-port", One, DISCOVERY_KNOB),
    ignored("service-discovery-namespace", One, DISCOVERY_KNOB),
    ignored("kv-connector-annotation", One, DISCOVERY_KNOB),
    ignored("kv-engine-id-annotation", One, DISCOVERY_KNOB),
    ignored("model-id-from", One, DISCOVERY_KNOB),
    // Router mesh (HA).
    refused("enable-mesh", Nothing, MESH),
    refused("mesh-server-name", One, MESH),
    refused("mesh-host", One, MESH),
    refused("mesh-advertise-host", One, MESH),
    refused("mesh-port", One, MESH),
    refused("mesh-peer-urls", Any, MESH),
    refused("mesh-tls-ca-cert", One, MESH),
    refused("mesh-tls-cert", One, MESH),
    refused("mesh-tls-key", One, MESH),
    refused("router-selector", Many, MESH),
    // Logging, metrics, tracing.
    same("log-level", One, "log_level"),
    same("log-json", Nothing, "json_log"),
    same("prometheus-port", One, "prometheus_port"),
    same("prometheus-host", One, "prometheus_host"),
    ignored("log-dir", One, "logs go to stderr (--log-level, --json-log)"),
    ignored("log-mm-timing", Nothing, MULTIMODAL),
    ignored("prometheus-duration-buckets", Many, "fixed buckets on /metrics"),
    ignored("jemalloc-prof-dir", One, "none: no heap profiling route"),
    ignored("request-id-headers", Any, "none: request headers are forwarded to the worker unchanged"),
    ignored("enable-trace", Nothing, NO_OTEL),
    ignored("otlp-traces-endpoint", One, NO_OTEL),
    // Models, tokenizer, parsers.
    same("model-path", One, "model_path"),
    same("model", One, "model_path"),
    same("tokenizer-path", One, "tokenizer_path"),
    ignored("model-alias", One, "none: the request's model field is forwarded unchanged"),
    ignored("chat-template", One, NO_TOKENIZER),
    ignored("disable-tokenizer-autoload", Nothing, "none needed: kvrouter never downloads a tokenizer (--model-path / --tokenizer-path name a local one)"),
    ignored("tokenizer-cache-enable-l0", Nothing, TOKENIZER_CACHE),
    ignored("tokenizer-cache-l0-max-entries", One, TOKENIZER_CACHE),
    ignored("tokenizer-cache-l0-max-memory", One, TOKENIZER_CACHE),
    ignored("tokenizer-cache-enable-l1", Nothing, TOKENIZER_CACHE),
    ignored("tokenizer-cache-l1-max-memory", One, TOKENIZER_CACHE),
    ignored("parser", One, NO_TOKENIZER),
    ignored("reasoning-parser", One, NO_TOKENIZER),
    ignored("tool-call-parser", One, NO_TOKENIZER),
    refused("mcp-config-path", One, "kvrouter runs no MCP tools (the tool loop of SMG's Responses API): requests go to the workers unchanged; keep SMG in front for MCP"),
    ignored("multimodal-tensor-transport", One, MULTIMODAL),
    ignored("multimodal-shm-min-bytes", One, MULTIMODAL),
    ignored("multimodal-max-inflight-bytes", One, MULTIMODAL),
    ignored("mm-per-request-image-limit", One, MULTIMODAL),
    ignored("mm-processing", One, MULTIMODAL),
    ignored("mm-pixel-cache-mb", One, MULTIMODAL),
    ignored("mm-pixel-rdma", Nothing, MULTIMODAL),
    ignored("mm-allowed-media-domains", One, MULTIMODAL),
    ignored("mm-allow-private-media-hosts", Nothing, MULTIMODAL),
    ignored("rdma-listen-ip", One, MULTIMODAL),
    ignored("rdma-slot-ttl-s", One, MULTIMODAL),
    refused("enable-wasm", Nothing, "no WebAssembly middleware: the modules it would load would not run"),
    // History storage.
    ignored("history-backend", One, STORAGE),
    ignored("history-memory-max-responses", One, STORAGE),
    ignored("history-memory-max-items", One, STORAGE),
    ignored("history-memory-retention-secs", One, STORAGE),
    ignored("storage-hook-wasm-path", One, STORAGE),
    ignored("storage-context-headers", Any, STORAGE),
    ignored("schema-config", One, STORAGE),
    ignored("oracle-wallet-path", One, STORAGE),
    ignored("oracle-tns-alias", One, STORAGE),
    ignored("oracle-connect-descriptor", One, STORAGE),
    ignored("oracle-username", One, STORAGE),
    ignored("oracle-password", One, STORAGE),
    ignored("oracle-external-auth", Nothing, STORAGE),
    ignored("oracle-pool-min", One, STORAGE),
    ignored("oracle-pool-max", One, STORAGE),
    ignored("oracle-pool-timeout-secs", One, STORAGE),
    ignored("postgres-db-url", One, STORAGE),
    ignored("postgres-pool-max", One, STORAGE),
    ignored("postgres-op-timeout-secs", One, STORAGE),
    ignored("redis-url", One, STORAGE),
    ignored("redis-pool-max", One, STORAGE),
    ignored("redis-retention-days", One, STORAGE),
    ignored("redis-op-timeout-secs", One, STORAGE),
    // TLS and authentication.
    refused("tls-cert-path", One, SERVER_TLS),
    refused("tls-key-path", One, SERVER_TLS),
    refused("client-cert-path", One, WORKER_TLS),
    refused("client-key-path", One, WORKER_TLS),
    refused("ca-cert-paths", Any, WORKER_TLS),
    refused("control-plane-api-keys", Any, "no per-key roles: --admin-api-key guards the admin and worker-management routes, --api-key the data plane"),
    ignored("control-plane-audit-enabled", Nothing, "none: admin actions are logged at info"),
    refused("jwt-issuer", One, JWT),
    refused("jwt-audience", One, JWT),
    refused("jwt-jwks-uri", One, JWT),
    refused("jwt-role-mapping", Any, JWT),
    refused("tenant-api-key", One, "no per-tenant keys: one --api-key for the data plane"),
    ignored("trust-tenant-header", Nothing, TENANTS),
    ignored("tenant-header-name", One, TENANTS),
    ignored("cors-allowed-origins", Any, "none: no CORS handling"),
];

/// The table entry for `flag` (without `--`).
pub fn find(flag: &str) -> Option<&'static PeerFlag> {
    PEER_FLAGS.iter().find(|p| p.flag == flag)
}

/// The kvrouter long flag (without `--`) of option `ours` (snake_case id).
fn long_of(ours: &str) -> String {
    ours.replace('_', "-")
}

fn hidden_arg(p: &PeerFlag) -> Arg {
    let arg = Arg::new(p.flag).long(p.flag).hide(true);
    match p.takes {
        Takes::Nothing => arg.action(ArgAction::Count),
        Takes::One => arg
            .num_args(1)
            .allow_negative_numbers(true)
            .action(ArgAction::Append),
        Takes::Many => arg
            .num_args(1..)
            .allow_negative_numbers(true)
            .action(ArgAction::Append),
        Takes::Any => arg
            .num_args(0..)
            .allow_negative_numbers(true)
            .action(ArgAction::Append),
    }
}

/// `cmd` (the [`super::Options`] command) with every peer flag: a visible alias on the option
/// of each differently named [`Kind::Same`] flag, a hidden argument (id: the kebab-case flag,
/// which no snake_case option id can clash with) for each Ignored and Refused one.
pub fn with_peer_flags(cmd: Command) -> Command {
    PEER_FLAGS.iter().fold(cmd, |cmd, p| match p.kind {
        Kind::Same(ours) if long_of(ours) == p.flag => cmd,
        Kind::Same(ours) => cmd.mut_arg(ours, |a| a.visible_alias(p.flag)),
        Kind::Ignored(_) | Kind::Refused(_) => cmd.arg(hidden_arg(p)),
    })
}

fn on_command_line(m: &ArgMatches, p: &PeerFlag) -> bool {
    !matches!(p.kind, Kind::Same(_))
        && matches!(
            m.value_source(p.flag),
            Some(clap::parser::ValueSource::CommandLine)
        )
}

/// The ignored flags given in `m`, in table order.
pub fn given(m: &ArgMatches) -> Vec<&'static PeerFlag> {
    PEER_FLAGS
        .iter()
        .filter(|p| matches!(p.kind, Kind::Ignored(_)) && on_command_line(m, p))
        .collect()
}

/// The error for the first refused flag given in `m` (in table order), if any.
pub fn refusal(m: &ArgMatches) -> Option<clap::Error> {
    PEER_FLAGS
        .iter()
        .find(|p| matches!(p.kind, Kind::Refused(_)) && on_command_line(m, p))
        .map(|p| clap::Error::raw(ErrorKind::ArgumentConflict, refusal_message(p)))
}

/// Why refused flag `p` is an error (empty for other kinds).
pub fn refusal_message(p: &PeerFlag) -> String {
    match p.kind {
        Kind::Refused(why) => format!("--{} (sgl-router / SMG) is not supported: {why}", p.flag),
        _ => String::new(),
    }
}

/// The startup warning line for ignored flag `p`.
pub fn warning(p: &PeerFlag) -> String {
    let instead = match p.kind {
        Kind::Ignored(instead) => instead,
        Kind::Same(_) | Kind::Refused(_) => "",
    };
    format!(
        "--{} is an sgl-router / SMG flag that kvrouter accepts and ignores; kvrouter equivalent: {instead}",
        p.flag
    )
}

/// clap's unknown-argument error without its "similar argument" tip (which points at unrelated
/// kvrouter flags: `--prefil` -> `--kv-prefill-weight`): every peer flag is in [`PEER_FLAGS`],
/// so a flag that is still unknown is no sgl-router / SMG flag either. Other errors unchanged.
pub fn explain_unknown(e: clap::Error, cmd: &mut Command) -> clap::Error {
    if e.kind() != ErrorKind::UnknownArgument {
        return e;
    }
    let arg = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => s.clone(),
        _ => return e,
    };
    let message = if arg.starts_with('-') {
        format!(
            "unexpected argument '{arg}': neither a kvrouter flag nor an sgl-router 0.3.2 / SMG 1.13 \
             one (`router --help` lists the flags; docs/migration.md maps every peer flag)"
        )
    } else {
        format!("unexpected argument '{arg}' (a value after a flag that takes none?)")
    };
    clap::Error::raw(ErrorKind::UnknownArgument, message).format(cmd)
}

fn md_takes(t: Takes) -> &'static str {
    match t {
        Takes::Nothing => "switch",
        Takes::One => "1",
        Takes::Many => "1+",
        Takes::Any => "0+",
    }
}

/// The docs/migration.md table of [`PEER_FLAGS`] (checked by `tests/config/peer_flag_table.rs`).
pub fn markdown_table() -> String {
    let mut out = String::from("| sgl-router / SMG flag | values | kvrouter |\n|---|---|---|\n");
    for p in PEER_FLAGS {
        let what = match p.kind {
            Kind::Same(ours) if long_of(ours) == p.flag => "same option".to_string(),
            Kind::Same(ours) => format!("alias of `--{}`", long_of(ours)),
            Kind::Ignored(instead) => format!("ignored (one warning); instead: {instead}"),
            Kind::Refused(why) => format!("**refused** (exit 2): {why}"),
        };
        out.push_str(&format!(
            "| `--{}` | {} | {} |\n",
            p.flag,
            md_takes(p.takes),
            what.replace('|', "\\|")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn flags_are_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for p in PEER_FLAGS {
            assert!(seen.insert(p.flag), "{} twice", p.flag);
        }
    }

    /// Every Same entry names a real option, and the alias takes what the peer's flag takes.
    #[test]
    fn same_flags_name_options() {
        let cmd = super::super::Options::command();
        for p in PEER_FLAGS {
            if let Kind::Same(ours) = p.kind {
                let arg = cmd.get_arguments().find(|a| a.get_id() == ours);
                let arg = arg.unwrap_or_else(|| panic!("--{}: no option {ours}", p.flag));
                assert_eq!(arg.get_long(), Some(long_of(ours).as_str()), "{ours}");
            }
        }
    }

    #[test]
    fn values_are_consumed() {
        let cmd = PEER_FLAGS
            .iter()
            .filter(|p| !matches!(p.kind, Kind::Same(_)))
            .fold(Command::new("t").no_binary_name(true), |c, p| {
                c.arg(hidden_arg(p))
            });
        let m = cmd
            .try_get_matches_from([
                "--cache-threshold",
                "0.3",
                "--disable-health-check",
                "--cors-allowed-origins",
                "a",
                "b",
                "--request-id-headers",
                "--enable-rl",
                "--encode",
                "http://e:1",
                "9000",
            ])
            .unwrap();
        let flags: Vec<_> = given(&m).iter().map(|p| p.flag).collect();
        assert_eq!(
            flags,
            [
                "enable-rl",
                "cache-threshold",
                "disable-health-check",
                "request-id-headers",
                "cors-allowed-origins"
            ]
        );
        let refused = refusal(&m).unwrap().to_string();
        assert!(
            refused.contains("--encode") && refused.contains("EPD"),
            "{refused}"
        );
        assert!(warning(find("cache-threshold").unwrap()).contains("--cache-threshold"));
    }
}
