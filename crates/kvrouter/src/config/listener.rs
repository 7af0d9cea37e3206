//! `ServerSettings`: the router's listeners and who may use them (`--host`, `--port`, the API
//! and admin keys, `--insecure-admin`, the Prometheus listener, the shutdown grace), and the
//! admin-access rules read from them.

use std::time::Duration;

/// The validated listener settings (`Debug` prints the keys as `***`).
#[derive(Clone)]
pub struct ServerSettings {
    pub host: String,
    pub port: u16,
    pub api_key: Option<String>,
    /// Key for admin and worker-management routes; falls back to `api_key` when unset.
    pub admin_api_key: Option<String>,
    /// Serve admin routes keyless on a non-loopback host (see [`ServerSettings::admin_locked`]).
    pub insecure_admin: bool,
    /// How long a SIGTERM/SIGINT drain waits for requests in flight (0 = abort at once).
    pub shutdown_grace_period: Duration,
    /// `--prometheus-host:--prometheus-port`: a second listener serving only `/metrics`.
    pub prometheus: Option<(String, u16)>,
    /// `--prometheus-port` was given (flag or environment, or another port than 29000 in the
    /// file): a busy port stops the start; at the default port (29000) it is a warning, as
    /// several routers on one host (and tests) would otherwise clash over it.
    pub prometheus_port_given: bool,
}

impl std::fmt::Debug for ServerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = |k: &Option<String>| k.as_ref().map(|_| "***");
        f.debug_struct("ServerSettings")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("api_key", &key(&self.api_key))
            .field("admin_api_key", &key(&self.admin_api_key))
            .field("insecure_admin", &self.insecure_admin)
            .field("shutdown_grace_period", &self.shutdown_grace_period)
            .field("prometheus", &self.prometheus)
            .field("prometheus_port_given", &self.prometheus_port_given)
            .finish()
    }
}

impl ServerSettings {
    /// The key admin routes require: `admin_api_key`, else `api_key` (as in sgl-router, where
    /// admin routes fall back to the `--api-key` Bearer check), else none.
    pub fn effective_admin_key(&self) -> Option<&str> {
        self.admin_api_key.as_deref().or(self.api_key.as_deref())
    }

    /// True when `host` only accepts local connections: 127.0.0.0/8, ::1 or "localhost".
    pub fn host_is_loopback(&self) -> bool {
        self.host == "localhost"
            || self
                .host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// True when admin routes must refuse (403): no admin key (nor `--api-key`), a
    /// non-loopback bind and no `--insecure-admin`.
    pub fn admin_locked(&self) -> bool {
        self.effective_admin_key().is_none() && !self.insecure_admin && !self.host_is_loopback()
    }

    /// The one startup warning about admin access, if the configuration deserves one.
    pub fn admin_warning(&self) -> Option<String> {
        let host = &self.host;
        if self.admin_locked() {
            Some(format!(
                "admin routes are disabled (403): --host {host} is not loopback and no \
                 --admin-api-key is set; set --admin-api-key or pass --insecure-admin"
            ))
        } else if self.effective_admin_key().is_none() && !self.host_is_loopback() {
            Some(format!(
                "--insecure-admin: admin routes (flush, pause, weight updates, abort, worker \
                 removal) are open to anyone who can reach --host {host}"
            ))
        } else if self.admin_api_key.is_none() && self.api_key.is_some() {
            Some(
                "no --admin-api-key: every --api-key holder can use the admin routes \
                 (sgl-router semantics); set --admin-api-key to separate them"
                    .to_string(),
            )
        } else {
            None
        }
    }
}
