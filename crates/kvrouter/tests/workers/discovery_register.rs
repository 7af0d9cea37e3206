//! `router register`: on SIGTERM the sidecar revokes its lease (the key goes at once, long
//! before its TTL) and routers drain the worker; a worker that never becomes healthy is not
//! registered (exit status 1).

use crate::support;

use std::time::Duration;

use support::etcd::{EtcdServer, Sidecar};
use support::procs::{fast_mock, free_port, start_router};
use support::wait::wait_for;

async fn worker_count(router: &str) -> usize {
    support::admin::workers(router).await["workers"]
        .as_array()
        .map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_deregisters_on_sigterm() {
    let etcd = EtcdServer::start().await;
    let mock = fast_mock();
    let router = start_router(&["--etcd-endpoints", &etcd.endpoint]);
    // A TTL far beyond the test's deadlines: only the revoke can remove the key in time.
    let mut sidecar = Sidecar::start(&[
        "--worker-url",
        &mock.url,
        "--etcd-endpoints",
        &etcd.endpoint,
        "--etcd-lease-ttl-secs",
        "600",
        "--label",
        "pool=a",
    ]);
    support::admin::wait_healthy_count(&router.url, 1).await;
    let listed = support::admin::workers(&router.url).await;
    assert_eq!(
        listed["workers"][0]["metadata"]["labels"]["pool"], "a",
        "{listed}"
    );

    sidecar.sigterm();
    let status = sidecar
        .wait_exit(Duration::from_secs(20))
        .expect("sidecar exits after SIGTERM");
    assert!(status.success(), "exit status {status}");
    let said = sidecar.stdout.recv_timeout(Duration::from_secs(1));
    assert_eq!(said.ok(), Some(format!("deregistered {}", sidecar.key)));
    assert!(
        etcd.get(&sidecar.key).await.is_none(),
        "key deleted by the revoke"
    );
    let r = router.url.clone();
    wait_for("the router to remove the deregistered worker", || {
        let r = r.clone();
        async move { worker_count(&r).await == 0 }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_gives_up_on_a_worker_that_never_answers() {
    let etcd = EtcdServer::start().await;
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_router"))
        .args(["register", "--worker-url", &nowhere, "--etcd-endpoints"])
        .arg(&etcd.endpoint)
        .args(["--startup-timeout-secs", "0.5"])
        .output()
        .expect("run router register");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).is_empty());
    let mut c = etcd.client().await;
    let keys = c
        .get(
            "/kvrouter/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .expect("get");
    assert!(keys.kvs().is_empty(), "nothing registered");
}

#[test]
fn register_refuses_credentials_in_the_url() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_router"))
        .args(["register", "--worker-url", "http://u:secret@127.0.0.1:1"])
        .args(["--etcd-endpoints", "127.0.0.1:1"])
        .output()
        .expect("run router register");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("credentials") && !err.contains("secret"),
        "{err}"
    );
}
