//! A `router` child whose stdout and stderr are both captured (support::Proc inherits
//! stderr), for tests that read the router's log lines.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `router` with its stderr lines; killed on drop.
pub struct Captured {
    child: Child,
    /// Base URL from the readiness line.
    pub url: String,
    stderr: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Drop for Captured {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lines(r: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

impl Captured {
    /// Starts `router --host 127.0.0.1 --port 0` plus `args` and waits for `listening on URL`.
    pub fn start(args: &[&str]) -> Captured {
        let mut all = vec!["--host", "127.0.0.1", "--port", "0"];
        all.extend_from_slice(args);
        Captured::start_exact(&all)
    }

    /// Starts `router` with exactly `args` (a user's whole command line) and waits for
    /// `listening on URL`.
    pub fn start_exact(args: &[&str]) -> Captured {
        Captured::start_exact_env(args, &[])
    }

    /// [`Captured::start`] with extra environment variables.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Captured {
        let mut all = vec!["--host", "127.0.0.1", "--port", "0"];
        all.extend_from_slice(args);
        Captured::start_exact_env(&all, env)
    }

    /// [`Captured::start_exact`] with extra environment variables.
    pub fn start_exact_env(args: &[&str], env: &[(&str, &str)]) -> Captured {
        let mut child = Command::new(env!("CARGO_BIN_EXE_router"))
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start router: {e}"));
        let stdout = lines(child.stdout.take().expect("piped stdout"));
        let stderr = lines(child.stderr.take().expect("piped stderr"));
        let url = loop {
            match stdout.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => {
                    if let Some(url) = line.strip_prefix("listening on ") {
                        break url.trim().to_string();
                    }
                }
                Err(e) => {
                    let _ = child.kill();
                    let err: Vec<String> = stderr.try_iter().collect();
                    panic!("router {args:?} did not start: {e}\n{}", err.join("\n"));
                }
            }
        };
        Captured {
            child,
            url,
            stderr,
            seen: Vec::new(),
        }
    }

    /// The router's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `within` for the router to exit on its own: its status, or None.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Every stderr line so far, after waiting (up to 30 s) until one contains `wanted`.
    pub fn stderr_until(&mut self, wanted: &str) -> &[String] {
        self.stderr_until_all(&[wanted])
    }

    /// Every stderr line so far, after waiting (up to 30 s) until `n` lines contain `wanted`.
    pub fn stderr_until_count(&mut self, wanted: &str, n: usize) -> &[String] {
        self.stderr_until_seen(|seen| seen.iter().filter(|l| l.contains(wanted)).count() >= n)
    }

    /// Every stderr line so far, after waiting (up to 30 s) until each of `wanted` is contained
    /// in some line.
    pub fn stderr_until_all(&mut self, wanted: &[&str]) -> &[String] {
        self.stderr_until_seen(|seen| wanted.iter().all(|w| seen.iter().any(|l| l.contains(w))))
    }

    /// Every stderr line so far, after reading lines (up to 30 s) until `done` holds for them.
    fn stderr_until_seen(&mut self, done: impl Fn(&[String]) -> bool) -> &[String] {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done(&self.seen) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => break,
            }
        }
        self.seen.extend(self.stderr.try_iter());
        &self.seen
    }
}
