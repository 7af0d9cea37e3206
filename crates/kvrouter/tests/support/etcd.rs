//! A real `etcd` on loopback ports (client and peer), ready once a client read succeeds,
//! restartable on the same ports and data directory, killed on drop; and the
//! `router register` sidecar as a child process that announces `registered <key> ...`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::procs::free_port;
use super::wait::Deadline;

/// A running single-member etcd.
pub struct EtcdServer {
    child: Option<Child>,
    /// `http://127.0.0.1:<client port>`.
    pub endpoint: String,
    client_port: u16,
    peer_port: u16,
    dir: tempfile::TempDir,
}

impl EtcdServer {
    /// Starts etcd and waits until it serves reads. Fails the test with install instructions
    /// when the binary is missing.
    pub async fn start() -> Self {
        let mut server = EtcdServer {
            child: None,
            endpoint: String::new(),
            client_port: free_port(),
            peer_port: free_port(),
            dir: tempfile::tempdir().expect("tempdir"),
        };
        server.endpoint = format!("http://127.0.0.1:{}", server.client_port);
        server.launch().await;
        server
    }

    async fn launch(&mut self) {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let child = Command::new("etcd")
            .args(["--name", "t", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("t={peer}")])
            .args(["--logger", "zap", "--log-level", "error"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start etcd ({e}); install it with `apt-get install etcd-server` (scripts/test does)")
            });
        self.child = Some(child);
        let deadline = Deadline::after(Duration::from_secs(30));
        loop {
            if let Ok(mut c) = etcd_client::Client::connect([self.endpoint.as_str()], None).await {
                let read = tokio::time::timeout(Duration::from_secs(1), c.get("probe", None)).await;
                if matches!(read, Ok(Ok(_))) {
                    return;
                }
            }
            deadline.check(&format!("etcd at {} to serve reads", self.endpoint));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills etcd (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kills etcd and starts it again on the same ports and data (keys, leases and revisions
    /// survive, as after a crash).
    pub async fn restart(&mut self) {
        self.kill();
        self.launch().await;
    }

    /// A fresh client.
    pub async fn client(&self) -> etcd_client::Client {
        etcd_client::Client::connect([self.endpoint.as_str()], None)
            .await
            .expect("connect to etcd")
    }

    /// The value of `key`, if present.
    pub async fn get(&self, key: &str) -> Option<Vec<u8>> {
        let mut c = self.client().await;
        let resp = c.get(key, None).await.expect("etcd get");
        resp.kvs().first().map(|kv| kv.value().to_vec())
    }

    /// Writes `key` = `value` (no lease).
    pub async fn put(&self, key: &str, value: &[u8]) {
        let mut c = self.client().await;
        c.put(key, value, None).await.expect("etcd put");
    }

    /// Deletes `key`.
    pub async fn delete(&self, key: &str) {
        let mut c = self.client().await;
        c.delete(key, None).await.expect("etcd delete");
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running `router register` sidecar, killed on drop.
pub struct Sidecar {
    child: Child,
    /// The key it announced.
    pub key: String,
    /// Stdout lines after the announcement.
    pub stdout: mpsc::Receiver<String>,
}

impl Sidecar {
    /// Starts `router register <args>` and waits up to 60 s for `registered <key> lease <id>`.
    pub fn start(args: &[&str]) -> Sidecar {
        let bin = env!("CARGO_BIN_EXE_router");
        let mut child = Command::new(bin)
            .arg("register")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start router register: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let key = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => match line.strip_prefix("registered ") {
                Some(rest) => rest.split_whitespace().next().unwrap_or("").to_string(),
                None => panic!("router register printed {line:?} before registering"),
            },
            Err(e) => {
                let _ = child.kill();
                panic!("router register {args:?} did not announce its registration: {e}");
            }
        };
        Sidecar {
            child,
            key,
            stdout: rx,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM.
    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -TERM failed");
    }

    /// Waits up to `within` for the exit status.
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

    /// SIGKILL: no deregistration, the key stays until its lease expires.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        self.kill();
    }
}
