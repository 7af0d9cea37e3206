//! Validated resource limits of the HTTP server and the data plane (`Config::limits`): the
//! flags are declared in options.rs; this file checks them and resolves `max_connections = 0`
//! from the process's open-file limit.

use std::time::Duration;

use super::{invalid, secs, ConfigError, Options};

/// The server's and the data plane's limits (docs/router.md, "Limits").
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Largest request body accepted (beyond: 413).
    pub max_payload_size: usize,
    /// Time to receive a request head (HTTP/1), and idle time between keep-alive requests.
    pub header_read_timeout: Duration,
    /// Base deadline of a new connection's first request head (connections/head_deadline.rs).
    pub request_head_timeout: Duration,
    /// Longest gap between two request-body frames.
    pub body_read_timeout: Duration,
    /// Client connections open at once (resolved, never 0).
    pub max_connections: usize,
    /// Data-plane requests handled at once (`None`: no limit).
    pub max_concurrent_requests: Option<usize>,
    /// Requests waiting for a slot beyond `max_concurrent_requests` (0: 429 at once).
    pub queue_size: usize,
    /// Longest wait in that queue (beyond: 408).
    pub queue_timeout: Duration,
    pub http2_max_concurrent_streams: u32,
    /// `None`: no keep-alive PINGs.
    pub http2_keep_alive_interval: Option<Duration>,
    /// No-progress time after which a request to an unhealthy worker is aborted.
    pub stream_idle_timeout: Duration,
}

impl Limits {
    pub(super) fn from_options(o: &Options) -> Result<Limits, ConfigError> {
        let max_concurrent_requests = match o.max_concurrent_requests {
            -1 => None,
            n if n >= 1 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
            n => {
                return Err(invalid(
                    "max_concurrent_requests",
                    format!("must be -1 (no limit) or at least 1 (got {n})"),
                ))
            }
        };
        if o.http2_max_concurrent_streams == 0 {
            return Err(invalid(
                "http2_max_concurrent_streams",
                "must be at least 1",
            ));
        }
        let http2_keep_alive_interval = if o.http2_keep_alive_interval_secs == 0.0 {
            None
        } else {
            Some(secs(
                "http2_keep_alive_interval_secs",
                o.http2_keep_alive_interval_secs,
            )?)
        };
        Ok(Limits {
            max_payload_size: o.max_payload_size,
            header_read_timeout: secs("header_read_timeout_secs", o.header_read_timeout_secs)?,
            request_head_timeout: secs("request_head_timeout_secs", o.request_head_timeout_secs)?,
            body_read_timeout: secs("body_read_timeout_secs", o.body_read_timeout_secs)?,
            max_connections: match o.max_connections {
                0 => auto_max_connections(open_file_limit()),
                n => n,
            },
            max_concurrent_requests,
            queue_size: o.queue_size,
            queue_timeout: secs("queue_timeout_secs", o.queue_timeout_secs)?,
            http2_max_concurrent_streams: o.http2_max_concurrent_streams,
            http2_keep_alive_interval,
            stream_idle_timeout: secs("stream_idle_timeout_secs", o.stream_idle_timeout_secs)?,
        })
    }
}

/// `max_connections = 0`: every client connection may need a second descriptor for its worker
/// connection, and 64 stay for listeners, event sockets and health checks.
pub(crate) fn auto_max_connections(open_files: Option<u64>) -> usize {
    let limit = open_files.unwrap_or(1024).min(1 << 24);
    usize::try_from(limit.saturating_sub(64) / 2)
        .unwrap_or(usize::MAX)
        .max(16)
}

/// The soft open-file limit of this process (`Max open files` in /proc/self/limits), when known.
fn open_file_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    parse_open_files(&text)
}

fn parse_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line
        .trim_start_matches("Max open files")
        .split_whitespace()
        .next()?;
    match soft {
        "unlimited" => Some(u64::MAX),
        n => n.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_files_are_read_from_proc_limits() {
        let text = "Limit                     Soft Limit           Hard Limit           Units\n\
                    Max open files            1024                 524288               files\n";
        assert_eq!(parse_open_files(text), Some(1024));
        assert_eq!(
            parse_open_files("Max open files unlimited unlimited files"),
            Some(u64::MAX)
        );
        assert_eq!(parse_open_files("nothing"), None);
    }

    #[test]
    fn auto_connections_leave_room_for_worker_connections() {
        assert_eq!(auto_max_connections(Some(1024)), 480);
        assert_eq!(auto_max_connections(None), 480);
        assert_eq!(auto_max_connections(Some(20)), 16);
        assert_eq!(auto_max_connections(Some(u64::MAX)), (1 << 23) - 32);
    }

    #[test]
    fn validation() {
        let mut o = Options::default();
        let l = Limits::from_options(&o).expect("defaults");
        assert_eq!(l.max_concurrent_requests, None);
        assert!(l.max_connections >= 16);
        o.max_concurrent_requests = 0;
        assert!(Limits::from_options(&o).is_err());
        o.max_concurrent_requests = 8;
        o.http2_keep_alive_interval_secs = 0.0;
        let l = Limits::from_options(&o).expect("valid");
        assert_eq!(l.max_concurrent_requests, Some(8));
        assert_eq!(l.http2_keep_alive_interval, None);
        o.body_read_timeout_secs = 0.0;
        assert!(Limits::from_options(&o).is_err());
    }
}
