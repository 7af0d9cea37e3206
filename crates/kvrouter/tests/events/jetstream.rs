//! KV events over JetStream (`--nats-jetstream`), real `nats-server -js` and `sglang-mock`
//! processes on loopback: a router that (re)starts rebuilds its index from the stream before
//! `/readiness` says ready and routes a warm prefix to the right worker at once; two relays
//! of one worker publish through one lock holder only, and the other takes over (no gap, no
//! duplicate) when the holder is killed.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream;
use support::http::{client, metric};
use support::kv::*;
use support::nats::{spawn_nats, wait_nats};
use support::wait::Deadline;

const STREAM: &str = "KVROUTER_KV";

fn js_flags(nats: &str) -> Vec<&str> {
    vec!["--nats-url", nats, "--nats-jetstream"]
}

/// `GET /readiness` until 200 with all `workers` registered (deadline 30 s).
async fn wait_ready(c: &reqwest::Client, router: &str, workers: usize) {
    let deadline = Deadline::after(Duration::from_secs(30));
    loop {
        let resp = c.get(format!("{router}/readiness")).send().await.unwrap();
        let ok = resp.status() == 200;
        let body = resp.text().await.unwrap_or_default();
        // Ready counts only registered workers, and the startup workers register one by one:
        // wait until all of them are registered (and so rebuilt) too.
        let all = serde_json::from_str::<serde_json::Value>(&body)
            .is_ok_and(|v| v["total_workers"].as_u64() == Some(workers as u64));
        if ok && all {
            return;
        }
        deadline.check(&format!("{router} to be ready; last: {body}"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every relayed batch in the stream: subject -> worker sequence numbers, in stream order.
async fn stream_seqs(nats: &support::nats::NatsServer) -> BTreeMap<String, Vec<u64>> {
    let js = jetstream::new(nats.client().await);
    let mut stream = js.get_stream(STREAM).await.unwrap();
    let last = stream.info().await.unwrap().state.last_sequence;
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for seq in 1..=last {
        let Ok(m) = stream.get_raw_message(seq).await else {
            continue;
        };
        let kv_seq = m.headers.get("Kvr-Seq").unwrap().as_str().parse().unwrap();
        out.entry(m.subject.to_string()).or_default().push(kv_seq);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_router_rebuilds_its_index_from_jetstream() {
    let nats = support::nats::NatsServer::start().await;
    let w1 = kv_mock(&["--speedup", "0"]);
    let w2 = kv_mock(&["--speedup", "0"]);
    let workers = [w1.url.as_str(), w2.url.as_str()];
    let mut relay_flags = js_flags(&nats.url);
    relay_flags.push("--publish-events");
    let relay = kv_router(&workers, &relay_flags);
    let c = client();
    wait_sources(&c, &relay.url, 2).await;
    warm_all(&c, &relay.url, &workers).await;
    // A warm prefix on each worker (sent straight to it), plus traffic through the relay.
    let (warm1, warm2) = (prompt(98, 64), prompt(99, 64));
    assert_eq!(generate(&c, &w1.url, &warm1, 2).await.0, 200);
    assert_eq!(generate(&c, &w2.url, &warm2, 2).await.0, 200);
    for i in 0..12u32 {
        let (status, _, body) = generate(&c, &relay.url, &prompt(i, 40 + 4 * i as usize), 3).await;
        assert_eq!(status, 200, "{body}");
    }
    // A consumer that was running all along converges to the relay's index.
    let first = kv_router(&workers, &js_flags(&nats.url));
    let deadline = Deadline::after(Duration::from_secs(30));
    let settled = loop {
        let (r, a) = (
            debug_index(&c, &relay.url).await,
            debug_index(&c, &first.url).await,
        );
        if r["resident_blocks"].as_u64().unwrap_or(0) > 50 && a["digest"] == r["digest"] {
            break r;
        }
        deadline.check(&format!("the consumer to converge: relay {r} consumer {a}"));
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    drop(first);

    // A router started now is ready only with the whole index rebuilt from the stream.
    let restarted = kv_router(&workers, &js_flags(&nats.url));
    wait_ready(&c, &restarted.url, workers.len()).await;
    let rebuilt = debug_index(&c, &restarted.url).await;
    assert_eq!(
        rebuilt["digest"], settled["digest"],
        "{rebuilt} vs {settled}"
    );
    assert_eq!(rebuilt["resident_blocks"], settled["resident_blocks"]);
    // And routes each warm prefix to the worker holding it at once.
    for (warm, worker) in [(&warm1, &w1.url), (&warm2, &w2.url)] {
        let mut ids = warm.clone();
        ids.extend(prompt(7, 8));
        let (status, picked, body) = generate(&c, &restarted.url, &ids, 1).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(picked.as_deref(), Some(worker.as_str()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_fails_over_without_gap_or_duplicate() {
    let nats = support::nats::NatsServer::start().await;
    let w = kv_mock(&["--speedup", "0"]);
    let mut flags = js_flags(&nats.url);
    flags.extend(["--publish-events", "--nats-relay-lock-ttl-secs", "1"]);
    let mut relays = [kv_router(&[&w.url], &flags), kv_router(&[&w.url], &flags)];
    let c = client();
    for r in &relays {
        wait_sources(&c, &r.url, 1).await;
        warm(&c, &r.url, &w.url).await;
    }
    // Traffic while both relays live: exactly one of them holds the lock and publishes.
    for i in 0..10u32 {
        assert_eq!(generate(&c, &w.url, &prompt(i, 24), 2).await.0, 200);
    }
    let deadline = Deadline::after(Duration::from_secs(30));
    let holder = loop {
        let held = [
            metric(&relays[0].url, "kvrouter_kv_relay_locks_held").await,
            metric(&relays[1].url, "kvrouter_kv_relay_locks_held").await,
        ];
        match held {
            [1.0, 0.0] => break 0,
            [0.0, 1.0] => break 1,
            _ => deadline.check(&format!("one relay to hold the lock: {held:?}")),
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    let before = wait_contiguous(&nats, 0).await;
    // Kill the holder; the other takes over and continues the stream.
    relays[holder].kill();
    let survivor = &relays[1 - holder];
    let deadline = Deadline::after(Duration::from_secs(30));
    let mut seed = 1000;
    loop {
        seed += 1;
        assert_eq!(generate(&c, &w.url, &prompt(seed, 24), 2).await.0, 200);
        if metric(&survivor.url, "kvrouter_kv_relay_locks_held").await == 1.0 {
            break;
        }
        deadline.check("the surviving relay to take the lock");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(generate(&c, &w.url, &prompt(seed + 1, 24), 2).await.0, 200);
    let after = wait_contiguous(&nats, before + 1).await;
    assert!(after > before, "the stream continued: {before} -> {after}");
}

/// Waits until the stream holds one subject whose worker sequences are exactly 0..=n with
/// n >= `min_last` (each batch once, none missing); returns n.
async fn wait_contiguous(nats: &support::nats::NatsServer, min_last: u64) -> u64 {
    let deadline = Deadline::after(Duration::from_secs(30));
    loop {
        let seqs = stream_seqs(nats).await;
        assert!(seqs.len() <= 1, "one worker, one rank: {seqs:?}");
        if let Some(list) = seqs.values().next() {
            let mut sorted = list.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(
                sorted.len(),
                list.len(),
                "a batch was published twice: {list:?}"
            );
            let n = list.len() as u64 - 1;
            if n >= min_last && sorted.iter().copied().eq(0..=n) {
                assert_eq!(list, &sorted, "published out of order");
                return n;
            }
            deadline.check(&format!("contiguous stream up to >= {min_last}: {list:?}"));
        } else {
            deadline.check("batches in the stream");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A `nats-server -js` on a fixed port and store directory that can be restarted in place.
struct RestartableNats {
    child: std::process::Child,
    port: u16,
    dir: tempfile::TempDir,
    url: String,
}

impl RestartableNats {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = support::procs::free_port();
        let child = Self::spawn(port, &dir);
        let s = Self {
            child,
            port,
            dir,
            url: format!("nats://127.0.0.1:{port}"),
        };
        s.wait_up().await;
        s
    }

    fn spawn(port: u16, dir: &tempfile::TempDir) -> std::process::Child {
        spawn_nats(port, &["-js", "-sd", dir.path().to_str().unwrap()])
    }

    async fn wait_up(&self) {
        wait_nats("nats-server to accept connections", || {
            async_nats::connect(self.url.as_str())
        })
        .await;
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    async fn restart(&mut self) {
        self.child = Self::spawn(self.port, &self.dir);
        self.wait_up().await;
    }
}

impl Drop for RestartableNats {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `name{label="value"} N` from a router's `/metrics` (0 when absent).
async fn labelled(router: &str, name: &str, label: &str) -> f64 {
    metric(router, &format!("{name}{{{label}}}")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_restart_mid_run_routers_reconnect_and_converge() {
    let mut nats = RestartableNats::start().await;
    let w1 = kv_mock(&["--speedup", "0"]);
    let w2 = kv_mock(&["--speedup", "0"]);
    let workers = [w1.url.as_str(), w2.url.as_str()];
    let mut relay_flags = js_flags(&nats.url);
    relay_flags.extend(["--publish-events", "--nats-relay-lock-ttl-secs", "1"]);
    let relay = kv_router(&workers, &relay_flags);
    let replica = kv_router(&workers, &js_flags(&nats.url));
    let c = client();
    wait_sources(&c, &relay.url, 2).await;
    warm_all(&c, &relay.url, &workers).await;
    let traffic = |from: u32| {
        let c = c.clone();
        let (relay, replica) = (relay.url.clone(), replica.url.clone());
        async move {
            for i in from..from + 10 {
                for r in [&relay, &replica] {
                    let (status, _, body) =
                        generate(&c, r, &prompt(i, 32 + i as usize % 16), 2).await;
                    assert_eq!(status, 200, "{r}: {body}");
                }
            }
        }
    };
    traffic(0).await;
    converge(&c, &relay.url, &replica.url).await;
    // NATS down: requests keep being served by both routers (nothing waits for events).
    // `KVR_NATS_OUTAGE_SECS` (figure in docs/events.md) keeps the traffic going that long.
    let outage: f64 = std::env::var("KVR_NATS_OUTAGE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    nats.stop();
    let t = std::time::Instant::now();
    let mut round = 100;
    traffic(round).await;
    while t.elapsed().as_secs_f64() < outage {
        round += 10;
        traffic(round).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let outage_traffic = t.elapsed();
    let outage_requests = (round - 100 + 10) * 2;
    nats.restart().await;
    traffic(200).await;
    // The relay catches the stream up from its buffer; the replica's consumer is recreated.
    let t = std::time::Instant::now();
    converge(&c, &relay.url, &replica.url).await;
    println!(
        "nats restart: {outage_requests} requests during the outage took {:.2} s; replica converged {:.2} s after the restart's traffic; \
         relay publish errors {}, replica gaps {}, recoveries {}, duplicates {}",
        outage_traffic.as_secs_f64(),
        t.elapsed().as_secs_f64(),
        labelled(&relay.url, "kvrouter_kv_event_relayed_total", "result=\"error\"").await,
        metric(&replica.url, "kvrouter_kv_event_gaps_total").await,
        metric(&replica.url, "kvrouter_kv_event_recoveries_total").await,
        metric(&replica.url, "kvrouter_kv_event_duplicates_total").await,
    );
}

/// Waits until the replica's index digest equals the relay's (deadline 60 s).
async fn converge(c: &reqwest::Client, relay: &str, replica: &str) {
    let deadline = Deadline::after(Duration::from_secs(60));
    loop {
        let (r, a) = (debug_index(c, relay).await, debug_index(c, replica).await);
        if r["resident_blocks"].as_u64().unwrap_or(0) > 0 && a["digest"] == r["digest"] {
            return;
        }
        deadline.check(&format!("the replica to converge: relay {r} replica {a}"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
