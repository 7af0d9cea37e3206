//! A real `etcd` on loopback ports (client and peer), ready once a client read succeeds,
//! restartable on the same ports and data directory, killed on drop; and the
//! `router register` sidecar as a child process that announces `registered <key> ...`.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::procs::{free_port, Proc};
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

/// A running `router register` sidecar, killed on drop (a [`Proc`] whose announcement is
/// its key: `pid`, `wait_exit`, `kill` and `stdout` come from it).
pub struct Sidecar {
    proc: Proc,
    /// The key it announced.
    pub key: String,
}

impl Sidecar {
    /// Starts `router register <args>` and waits up to 60 s for `registered <key> lease <id>`.
    pub fn start(args: &[&str]) -> Sidecar {
        let argv: Vec<&str> = std::iter::once("register")
            .chain(args.iter().copied())
            .collect();
        let proc = Proc::spawn_announcing(
            env!("CARGO_BIN_EXE_router"),
            &argv,
            "announce its registration",
            |line| {
                Some(match line.strip_prefix("registered ") {
                    Some(rest) => Ok(rest.split_whitespace().next().unwrap_or("").to_string()),
                    None => Err(format!("printed {line:?} before registering")),
                })
            },
        );
        Sidecar {
            key: proc.url.clone(),
            proc,
        }
    }

    /// Sends SIGTERM.
    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -TERM failed");
    }
}

impl std::ops::Deref for Sidecar {
    type Target = Proc;
    fn deref(&self) -> &Proc {
        &self.proc
    }
}

impl std::ops::DerefMut for Sidecar {
    fn deref_mut(&mut self) -> &mut Proc {
        &mut self.proc
    }
}
