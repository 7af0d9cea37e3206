//! Issue 25 finding 5, NATS path: the KV event feed on a NATS server that requires
//! authentication. A real `nats-server` started with a user/password (and one with a token),
//! a relay router (`--publish-events`) reading an `sglang-mock`'s ZMQ events and a replica
//! reading only NATS: with credentials (flags, `KVROUTER_NATS_*` variables, or `user:pass@`
//! in the URL) both connect and the replica's index follows the relay's; without them the
//! feed is refused by the server. The secrets never appear in the routers' logs (debug
//! level). Before the fix there was no way to give NATS credentials.
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

use crate::support;

use std::process::Child;
use std::time::Duration;

use support::captured::Captured;
use support::kv::{blocks_of, debug_index, generate, kv_mock, prompt, warm, ADMIN};
use support::nats::{spawn_nats, wait_nats};
use support::wait::Deadline;

const PASSWORD: &str = "nats-pw-7c1e94";
const TOKEN: &str = "nats-token-3b8d20";

/// A `nats-server` requiring `auth` (its command-line flags), killed on drop.
struct AuthNats {
    child: Child,
    url: String,
}

impl Drop for AuthNats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `nats-server` with `auth` flags; ready once `options` can connect.
async fn start_nats(auth: &[&str], options: impl Fn() -> async_nats::ConnectOptions) -> AuthNats {
    let port = support::free_port();
    let server = AuthNats {
        child: spawn_nats(port, auth),
        url: format!("nats://127.0.0.1:{port}"),
    };
    let url = server.url.as_str();
    wait_nats("nats-server to accept an authenticated connection", || {
        options().connect(url)
    })
    .await;
    server
}

fn kv_args<'a>(worker: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--mode",
        "kv",
        "--page-size",
        "4",
        "--admin-api-key",
        ADMIN,
        "--log-level",
        "debug",
        "--worker-urls",
        worker,
    ];
    args.extend_from_slice(extra);
    args
}

/// Waits until `replica`'s index holds `worker`'s blocks (fed from NATS only), sending new
/// prompts straight to the worker meanwhile (core NATS keeps nothing for a replica whose
/// subscription is not up yet).
async fn wait_replica(c: &reqwest::Client, replica: &str, worker: &str) {
    let deadline = Deadline::after(Duration::from_secs(30));
    let mut seed = 70_000;
    loop {
        seed += 1;
        let _ = generate(c, worker, &prompt(seed, 8), 1).await;
        let v = debug_index(c, replica).await;
        if blocks_of(&v, worker) > 0 && v["zmq_sources"] == 0 {
            return;
        }
        deadline.check(&format!("the replica to index {worker} from NATS: {v}"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn assert_no_secret(r: &mut Captured, secret: &str) {
    let lines = r.stderr_until("NATS");
    let leaked: Vec<&String> = lines.iter().filter(|l| l.contains(secret)).collect();
    assert!(leaked.is_empty(), "secret in the log: {leaked:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_and_password_authenticate_the_event_feed() {
    let nats = start_nats(&["--user", "router", "--pass", PASSWORD], || {
        async_nats::ConnectOptions::with_user_and_password("router".into(), PASSWORD.into())
    })
    .await;
    let w = kv_mock(&["--speedup", "0"]);
    let c = support::http::client();
    let mut relay = Captured::start(&kv_args(
        &w.url,
        &[
            "--nats-url",
            &nats.url,
            "--publish-events",
            "--nats-user",
            "router",
            "--nats-password",
            PASSWORD,
        ],
    ));
    let with_url_creds = nats
        .url
        .replace("nats://", &format!("nats://router:{PASSWORD}@"));
    let mut replica = Captured::start(&kv_args(&w.url, &["--nats-url", &with_url_creds]));
    let mut refused = Captured::start(&kv_args(&w.url, &["--nats-url", &nats.url]));

    warm(&c, &relay.url, &w.url).await;
    wait_replica(&c, &replica.url, &w.url).await;

    let lines = refused.stderr_until("cannot start the NATS KV event feed");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("cannot start the NATS KV event feed")),
        "a router without credentials was let in: {lines:?}"
    );
    assert_eq!(blocks_of(&debug_index(&c, &refused.url).await, &w.url), 0);
    for r in [&mut relay, &mut replica, &mut refused] {
        assert_no_secret(r, PASSWORD);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_from_the_environment_authenticates_the_event_feed() {
    let nats = start_nats(&["--auth", TOKEN], || {
        async_nats::ConnectOptions::with_token(TOKEN.into())
    })
    .await;
    let w = kv_mock(&["--speedup", "0"]);
    let c = support::http::client();
    let mut relay = Captured::start_with_env(
        &kv_args(&w.url, &["--nats-url", &nats.url, "--publish-events"]),
        &[("KVROUTER_NATS_TOKEN", TOKEN)],
    );
    let mut replica = Captured::start_with_env(
        &kv_args(&w.url, &["--nats-url", &nats.url]),
        &[("KVROUTER_NATS_TOKEN", TOKEN)],
    );
    warm(&c, &relay.url, &w.url).await;
    wait_replica(&c, &replica.url, &w.url).await;
    for r in [&mut relay, &mut replica] {
        assert_no_secret(r, TOKEN);
    }
}
