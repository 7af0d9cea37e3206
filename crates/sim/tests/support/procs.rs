//! Child processes of the simulator's tests: `sglang-mock` on an ephemeral loopback port,
//! waited for until its readiness line (`listening on http://HOST:PORT` on stdout), and killed
//! on drop; the paths of this crate's binaries.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A running child process that is killed (and reaped) when dropped.
pub struct Proc {
    child: Child,
    /// Base URL announced by the readiness line, e.g. `http://127.0.0.1:40123`.
    pub url: String,
}

impl Proc {
    /// Starts `bin` with `args` (add `--port 0` yourself) and waits up to 60 s for its
    /// `listening on URL` line.
    pub fn spawn(bin: &str, args: &[&str]) -> Proc {
        let mut child = Command::new(bin)
            .args(args)
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
                Ok(line) => {
                    if let Some(url) = line.strip_prefix("listening on ") {
                        break url.trim().to_string();
                    }
                }
                Err(e) => {
                    let _ = child.kill();
                    panic!("{bin} {args:?} did not announce readiness: {e}");
                }
            }
        };
        Proc { child, url }
    }

    /// `HOST:PORT` of the readiness line's URL (for raw TCP clients).
    pub fn addr(&self) -> &str {
        self.url.trim_start_matches("http://")
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

/// Path of one of this crate's binaries (`sglang-mock`, `loadgen`).
pub fn sim_bin(name: &str) -> String {
    match name {
        "sglang-mock" => env!("CARGO_BIN_EXE_sglang-mock"),
        "loadgen" => env!("CARGO_BIN_EXE_loadgen"),
        other => panic!("no binary {other:?} in kvrouter-sim"),
    }
    .to_string()
}

/// Starts one `sglang-mock` on 127.0.0.1, ephemeral port, with extra `args`.
pub fn mock(args: &[&str]) -> Proc {
    let mut all = vec!["--host", "127.0.0.1", "--port", "0"];
    all.extend_from_slice(args);
    Proc::spawn(&sim_bin("sglang-mock"), &all)
}
