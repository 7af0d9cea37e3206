//! Child processes of the tests: start one of the crate's binaries on a loopback port
//! (ephemeral, or fixed so it can be restarted behind the same URL), wait for its
//! readiness line, and kill it on drop.
//!
//! Readiness contract of every server binary (`router`, `sglang-mock`): once it
//! accepts connections it prints `listening on http://HOST:PORT` on stdout.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A running child process that is killed (and reaped) when dropped.
pub struct Proc {
    child: Child,
    /// Base URL announced by the readiness line, e.g. `http://127.0.0.1:40123`.
    pub url: String,
    /// Remaining stdout lines after the readiness line.
    pub stdout: mpsc::Receiver<String>,
}

impl Proc {
    /// Starts `bin` with `args` (add `--port 0` yourself) and waits up to 60 s for
    /// its `listening on URL` line.
    pub fn spawn(bin: &str, args: &[&str]) -> Proc {
        Proc::spawn_announcing(bin, args, "announce readiness", |line| {
            line.strip_prefix("listening on ")
                .map(|url| Ok(url.trim().to_string()))
        })
    }

    /// Starts `bin` with `args` and reads its stdout until `announce` decides on a line:
    /// `None` skips the line, `Some(Ok(v))` makes `v` the process's `url` (what it announced),
    /// `Some(Err(why))` panics. Panics if nothing is decided within 60 s (`what`: the awaited
    /// announcement, for the message).
    pub fn spawn_announcing(
        bin: &str,
        args: &[&str],
        what: &str,
        announce: impl FnMut(&str) -> Option<Result<String, String>>,
    ) -> Proc {
        Proc::spawn_env_announcing(bin, args, &[], what, announce)
    }

    /// [`Proc::spawn_announcing`] with extra environment variables for the child only (a test
    /// must not `set_var` its own environment: the other tests of its binary start children
    /// concurrently and would inherit it).
    pub fn spawn_env_announcing(
        bin: &str,
        args: &[&str],
        env: &[(&str, &str)],
        what: &str,
        mut announce: impl FnMut(&str) -> Option<Result<String, String>>,
    ) -> Proc {
        let mut child = Command::new(bin)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let url = loop {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => match announce(&line) {
                    None => {}
                    Some(Ok(v)) => break v,
                    Some(Err(why)) => {
                        let _ = child.kill();
                        panic!("{bin} {args:?}: {why}");
                    }
                },
                Err(e) => {
                    let _ = child.kill();
                    panic!("{bin} {args:?} did not {what}: {e}");
                }
            }
        };
        Proc {
            child,
            url,
            stdout: rx,
        }
    }

    /// OS process id (for signals in fault tests).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `within` for the process to exit on its own (after a signal); `None` if it
    /// is still running then.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the process now and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `bin` on 127.0.0.1:`port` (`0`: ephemeral) with extra `args`.
fn spawn_on(bin: &str, port: u16, args: &[&str]) -> Proc {
    spawn_env_on(bin, port, args, &[])
}

/// [`spawn_on`] with extra environment variables for the child.
fn spawn_env_on(bin: &str, port: u16, args: &[&str], env: &[(&str, &str)]) -> Proc {
    let port = port.to_string();
    let mut all = vec!["--host", "127.0.0.1", "--port", port.as_str()];
    all.extend_from_slice(args);
    Proc::spawn_env_announcing(bin, &all, env, "announce readiness", |line| {
        line.strip_prefix("listening on ")
            .map(|url| Ok(url.trim().to_string()))
    })
}

/// Path of a binary of the simulator crate (`sglang-mock`, `loadgen`). Cargo only exposes a
/// package's own binaries to its tests (`CARGO_BIN_EXE_*`), so this looks beside `router` in
/// the same target directory; `cargo test` at the workspace root builds both crates' binaries.
pub fn sim_bin(name: &str) -> String {
    let router = std::path::Path::new(env!("CARGO_BIN_EXE_router"));
    let path = router.with_file_name(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} is missing: run the tests from the workspace root (`cargo test --workspace`) \
         or build the simulator first (`cargo build -p kvrouter-sim --bins`)",
        path.display()
    );
    path.to_string_lossy().into_owned()
}

/// Starts one `sglang-mock` on an ephemeral port with extra `args`.
pub fn mock(args: &[&str]) -> Proc {
    mock_on(0, args)
}

/// Starts `sglang-mock` on a fixed `port` (so it can be restarted behind the same URL).
pub fn mock_on(port: u16, args: &[&str]) -> Proc {
    spawn_on(&sim_bin("sglang-mock"), port, args)
}

/// A fast `sglang-mock` (`--speedup 0`).
pub fn fast_mock() -> Proc {
    mock(&["--speedup", "0"])
}

/// Starts one `router` on an ephemeral port with extra `args`.
pub fn router(args: &[&str]) -> Proc {
    spawn_on(env!("CARGO_BIN_EXE_router"), 0, args)
}

/// Flags that make health checks fast in tests.
pub const FAST_HEALTH: &[&str] = &[
    "--health-check-interval-secs",
    "0.2",
    "--health-check-timeout-secs",
    "1",
    "--health-failure-threshold",
    "1",
    "--health-success-threshold",
    "1",
    "--retry-initial-backoff-ms",
    "5",
    "--log-level",
    "warn",
];

/// Starts a router with `args` plus those `FAST_HEALTH` flags `args` does not set.
pub fn start_router(args: &[&str]) -> Proc {
    start_router_env(args, &[])
}

/// [`start_router`] with extra environment variables (`KVROUTER_*`) for the router only.
pub fn start_router_env(args: &[&str], env: &[(&str, &str)]) -> Proc {
    let mut all: Vec<&str> = FAST_HEALTH
        .chunks(2)
        .filter(|pair| !args.contains(&pair[0]))
        .flatten()
        .copied()
        .collect();
    all.extend_from_slice(args);
    spawn_env_on(env!("CARGO_BIN_EXE_router"), 0, &all, env)
}

/// Starts a router over `workers` and waits until all of them are routable.
pub async fn router_with(workers: &[&str], extra: &[&str]) -> Proc {
    let joined = workers.join(",");
    let mut args = vec!["--worker-urls", joined.as_str()];
    args.extend_from_slice(extra);
    let r = start_router(&args);
    super::admin::wait_healthy_count(&r.url, workers.len()).await;
    r
}

/// A free TCP port on 127.0.0.1 (for endpoints a binary cannot bind to port 0,
/// such as per-DP-rank ZMQ port ranges). Racy by nature; use only when needed.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral port")
}

/// The base of `n` consecutive free TCP ports on 127.0.0.1 (SGLang's per-DP-rank rule puts
/// rank r on base + r), checked by binding all of them at once. Racy like [`free_port`],
/// but never hands out a range whose upper ports are already taken.
pub fn free_port_range(n: u16) -> u16 {
    for _ in 0..1000 {
        let base = free_port();
        if base.checked_add(n).is_none() {
            continue;
        }
        let held: Vec<_> = (0..n)
            .map_while(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).ok())
            .collect();
        if held.len() == usize::from(n) {
            return base;
        }
    }
    panic!("no {n} consecutive free ports on 127.0.0.1");
}
