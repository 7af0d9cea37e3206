//! `router register`: the sidecar a worker's launch script runs beside SGLang. It waits until
//! the local worker answers `/health`, reads its model and DP size from `/server_info`
//! (fallback `/get_server_info`), writes `<prefix>/workers/<id>` under a lease, prints
//! `registered <key> lease <hex id>` on stdout, renews the lease while it runs, and revokes
//! it on SIGTERM / SIGINT (the key disappears at once; if the sidecar dies without that, the
//! key expires with the lease TTL). Exit status: 0 after a signal, 1 when the worker never
//! became healthy, 2 for invalid arguments.

use std::ffi::OsString;
use std::io::Write;
use std::time::Duration;

use clap::Parser;
use tokio_util::sync::CancellationToken;

use super::client::connect;
use super::keys::{check_id, default_worker_id, worker_key};
use super::lease::LeasedKey;
use super::record::{check_api_key_env, WorkerRecord};
use super::settings::{check_ttl, normalize_prefix, parse_endpoints};
use crate::signals::Signals;
use crate::workers::http::{
    authorization, http_get_json, new_client, HttpClient, WORKER_IDLE_TIMEOUT,
};
use crate::workers::probe::{wait_healthy, ProbeTimeouts};
use crate::workers::WorkerInfo;

/// `router register` arguments (etcd flags and variables as the router's).
#[derive(Debug, Clone, Parser)]
#[command(
    name = "router register",
    about = "Register a worker in etcd for as long as this process runs (a sidecar beside SGLang)"
)]
pub struct RegisterArgs {
    /// The worker's URL as routers reach it (`http://10.0.0.5:30000`), no credentials.
    #[arg(long, env = "KVROUTER_REGISTER_WORKER_URL")]
    pub worker_url: String,
    /// URL this sidecar probes the worker at (default: `--worker-url`), e.g. `http://127.0.0.1:30000`.
    #[arg(long, env = "KVROUTER_REGISTER_PROBE_URL")]
    pub probe_url: Option<String>,
    /// etcd endpoints (comma-separated or repeated).
    #[arg(long, env = "KVROUTER_ETCD_ENDPOINTS", num_args = 1.., value_delimiter = ',', required = true)]
    pub etcd_endpoints: Vec<String>,
    /// Key prefix (the routers' `--etcd-prefix`).
    #[arg(long, env = "KVROUTER_ETCD_PREFIX", default_value = "/kvrouter")]
    pub etcd_prefix: String,
    /// Lease TTL in seconds: how long the key outlives this process when it dies unannounced.
    #[arg(long, env = "KVROUTER_ETCD_LEASE_TTL_SECS", default_value_t = 10)]
    pub etcd_lease_ttl_secs: u64,
    /// Last key segment (default: the URL without its scheme, `10.0.0.5:30000`).
    #[arg(long, env = "KVROUTER_REGISTER_WORKER_ID")]
    pub worker_id: Option<String>,
    /// `regular`, `prefill` or `decode`.
    #[arg(long, env = "KVROUTER_REGISTER_WORKER_TYPE")]
    pub worker_type: Option<String>,
    /// A prefill worker's PD bootstrap port (its `--disaggregation-bootstrap-port`).
    #[arg(long, env = "KVROUTER_REGISTER_BOOTSTRAP_PORT")]
    pub bootstrap_port: Option<u16>,
    /// Name of the environment variable (`KVROUTER_WORKER_API_KEY*`) holding the worker's API
    /// key, on the routers and here (this sidecar probes with it); only the name goes to etcd.
    #[arg(long, env = "KVROUTER_REGISTER_API_KEY_ENV")]
    pub api_key_env: Option<String>,
    /// A label `name=value` (repeatable), shown in `/workers`.
    #[arg(long = "label", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// How long to wait for the worker's first healthy `/health`, in seconds.
    #[arg(
        long,
        env = "KVROUTER_REGISTER_STARTUP_TIMEOUT_SECS",
        default_value_t = 600.0
    )]
    pub startup_timeout_secs: f64,
    /// Log filter (as the router's `--log-level`).
    #[arg(long, env = "KVROUTER_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

fn parse_label(raw: &str) -> Result<(String, String), String> {
    match raw.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("{raw:?} is not name=value")),
    }
}

/// The validated registration: key, record, and what to probe.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub endpoints: Vec<String>,
    pub key: String,
    pub ttl: i64,
    pub record: WorkerRecord,
    pub probe_url: String,
    pub startup_timeout: Duration,
}

impl RegisterArgs {
    /// Checks the arguments; the error names the flag.
    pub fn plan(&self) -> Result<Plan, String> {
        // Never echo a password back, even from a URL that did not parse.
        let shown = match self.worker_url.rsplit_once('@') {
            Some((_, rest)) => format!("***@{rest}"),
            None => self.worker_url.clone(),
        };
        let addr = crate::workers::url::parse_worker_url(&self.worker_url)
            .map_err(|e| format!("--worker-url {shown:?}: {e}"))?;
        if addr.credentials.is_some() {
            return Err(
                "--worker-url: credentials do not belong in etcd (use --api-key-env)".into(),
            );
        }
        let probe_url = match &self.probe_url {
            Some(u) => {
                crate::workers::url::parse_worker_url(u)
                    .map_err(|e| format!("--probe-url {u:?}: {e}"))?
                    .url
            }
            None => addr.url.clone(),
        };
        let endpoints =
            parse_endpoints(&self.etcd_endpoints).map_err(|e| format!("--etcd-endpoints: {e}"))?;
        if endpoints.is_empty() {
            return Err("--etcd-endpoints: at least one endpoint".into());
        }
        let prefix =
            normalize_prefix(&self.etcd_prefix).map_err(|e| format!("--etcd-prefix: {e}"))?;
        let ttl = check_ttl(self.etcd_lease_ttl_secs)
            .map_err(|e| format!("--etcd-lease-ttl-secs: {e}"))?;
        let id = self
            .worker_id
            .clone()
            .unwrap_or_else(|| default_worker_id(&addr.url));
        check_id(&id).map_err(|e| format!("--worker-id: {e}"))?;
        if let Some(name) = &self.api_key_env {
            check_api_key_env(name).map_err(|e| format!("--api-key-env: {e}"))?;
        }
        let startup = self.startup_timeout_secs;
        if !(startup.is_finite() && startup > 0.0 && startup < 1e9) {
            return Err(format!(
                "--startup-timeout-secs: must be positive (got {startup})"
            ));
        }
        Ok(Plan {
            endpoints,
            key: worker_key(&prefix, &id),
            ttl,
            record: WorkerRecord {
                url: addr.url,
                model: None,
                dp_size: None,
                worker_type: self.worker_type.clone(),
                bootstrap_port: self.bootstrap_port,
                api_key_env: self.api_key_env.clone(),
                labels: self.labels.iter().cloned().collect(),
            },
            probe_url,
            startup_timeout: Duration::from_secs_f64(startup),
        })
    }
}

/// Reads the worker's model and DP size (`/server_info`, fallback `/get_server_info`).
async fn read_worker(
    client: &HttpClient,
    url: &str,
    authorization: Option<&str>,
) -> Option<WorkerInfo> {
    let timeout = Duration::from_secs(5);
    for path in ["/server_info", "/get_server_info"] {
        match http_get_json(client, &format!("{url}{path}"), authorization, timeout).await {
            Ok(v) if v.is_object() => return Some(WorkerInfo::from_json(&v, None)),
            Ok(_) => {}
            Err(e) => tracing::debug!(worker = url, path, error = %e, "no server info here"),
        }
    }
    None
}

fn init_logging(level: &str) {
    let directive = crate::log_level::filter_directive(level);
    let filter = tracing_subscriber::EnvFilter::try_new(&directive)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Runs `router register` with `args` (the first being the subcommand's name); the exit status.
pub async fn main(args: impl IntoIterator<Item = OsString>) -> i32 {
    let (mut plan, mut signals) = match prepare(args) {
        Ok(p) => p,
        Err(status) => return status,
    };
    if let Err(status) = describe_worker(&mut plan, &mut signals).await {
        return status;
    }
    register_until_signal(&plan, &mut signals).await
}

/// Parses and checks the arguments, starts logging and installs the signal handlers (the
/// exit status when one of them fails).
fn prepare(args: impl IntoIterator<Item = OsString>) -> Result<(Plan, Signals), i32> {
    let args = match RegisterArgs::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return Err(if e.use_stderr() { 2 } else { 0 });
        }
    };
    init_logging(&args.log_level);
    let plan = match args.plan() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("router register: {e}");
            return Err(2);
        }
    };
    let signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("router register: cannot install signal handlers: {e}");
            return Err(1);
        }
    };
    Ok((plan, signals))
}

/// Waits until the worker is healthy, then fills the record's model and DP size from it
/// (the exit status when a signal came first or the worker never became healthy).
async fn describe_worker(plan: &mut Plan, signals: &mut Signals) -> Result<(), i32> {
    // The full `Authorization` value the probes send (`Bearer <key>`), when the worker has one.
    let api_key = plan
        .record
        .api_key_env
        .as_deref()
        .and_then(|n| std::env::var(n).ok())
        .and_then(|key| authorization(Some(&key), None));
    let http = new_client(Duration::from_secs(5), WORKER_IDLE_TIMEOUT);
    let timeouts = ProbeTimeouts {
        request: Duration::from_secs(5),
        startup: plan.startup_timeout,
    };
    tracing::info!(worker = %plan.probe_url, "waiting for the worker to become healthy");
    let healthy = tokio::select! {
        signal = signals.recv() => {
            tracing::info!(signal, "stopped before registering");
            return Err(0);
        }
        r = wait_healthy(&http, &plan.probe_url, api_key.as_deref(), timeouts) => r,
    };
    if let Err(e) = healthy {
        eprintln!("router register: {e}");
        return Err(1);
    }
    match read_worker(&http, &plan.probe_url, api_key.as_deref()).await {
        Some(info) => {
            plan.record.model = info.served_model_name.or(info.model_path);
            plan.record.dp_size = Some(info.dp_size);
        }
        None => {
            tracing::warn!(worker = %plan.probe_url, "no /server_info; registering without model and DP size")
        }
    }
    Ok(())
}

/// Writes the record under a lease, holds it until a signal, then revokes it; the exit status.
async fn register_until_signal(plan: &Plan, signals: &mut Signals) -> i32 {
    let value = match serde_json::to_vec(&plan.record) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("router register: cannot encode the record: {e}");
            return 1;
        }
    };
    let client = match connect(&plan.endpoints).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("router register: etcd {:?}: {e}", plan.endpoints);
            return 1;
        }
    };
    let held = LeasedKey::spawn(
        &crate::tasks::Tasks::new(),
        client,
        plan.key.clone(),
        value,
        plan.ttl,
        CancellationToken::new(),
    );
    let signal = tokio::select! {
        signal = signals.recv() => signal,
        lease = held.held() => {
            if let Some(lease) = lease {
                say(&format!("registered {} lease {lease:x}", plan.key));
                tracing::info!(key = %plan.key, url = %plan.record.url, "worker registered in etcd");
            }
            signals.recv().await
        }
    };
    tracing::info!(signal, key = %plan.key, "deregistering");
    if held.stop().await {
        say(&format!("deregistered {}", plan.key));
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Result<RegisterArgs, clap::Error> {
        let mut all = vec!["register", "--etcd-endpoints", "127.0.0.1:2379"];
        all.extend_from_slice(extra);
        RegisterArgs::try_parse_from(all)
    }

    #[test]
    fn plans_the_key_and_record() {
        let plan = args(&[
            "--worker-url",
            "http://10.0.0.5:30000/",
            "--label",
            "pool=a",
            "--api-key-env",
            "KVROUTER_WORKER_API_KEY_A",
        ])
        .unwrap()
        .plan()
        .unwrap();
        assert_eq!(plan.key, "/kvrouter/workers/10.0.0.5:30000");
        assert_eq!(plan.record.url, "http://10.0.0.5:30000");
        assert_eq!(plan.probe_url, "http://10.0.0.5:30000");
        assert_eq!(plan.record.labels["pool"], "a");
        assert_eq!(plan.ttl, 10);
    }

    #[test]
    fn refuses_secrets_and_bad_ids() {
        let bad = |extra: &[&str]| args(extra).unwrap().plan().unwrap_err();
        assert!(bad(&["--worker-url", "http://u:p@h:1"]).contains("credentials"));
        assert!(bad(&["--worker-url", "http://h:1", "--worker-id", "a/b"]).contains("--worker-id"));
        assert!(
            bad(&["--worker-url", "http://h:1", "--api-key-env", "PATH"]).contains("api_key_env")
        );
        assert!(args(&["--worker-url", "http://h:1", "--label", "novalue"]).is_err());
    }
}
