//! Refit latency added by the router: the trainer's sequence (pause -> flush -> update
//! weights -> update version -> continue) against two idle in-process `sglang-mock`s,
//! called directly (each step concurrently to both workers, as a trainer does) versus
//! through an in-process router (one fan-out call per step).
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion
#![allow(clippy::disallowed_methods)] // fixtures spawn their own tasks; `Tasks` is the router's

use std::sync::Arc;

use clap::Parser;
use criterion::{criterion_group, criterion_main, Criterion};
use futures::future::join_all;
use serde_json::{json, Value};

use kvrouter::config::{Cli, Config, FileConfig};
use kvrouter::server::{self, AppState};
use kvrouter_sim::mock::{self, MockArgs};

fn steps(pause_mode: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("/pause_generation", json!({"mode": pause_mode})),
        ("/flush_cache", json!({})),
        (
            "/update_weights_from_disk",
            json!({"model_path": "/m", "weight_version": "v1"}),
        ),
        ("/update_weight_version", json!({"new_version": "v1"})),
        ("/continue_generation", json!({})),
    ]
}

async fn post_ok(c: &reqwest::Client, url: String, body: &Value) {
    let r = c.post(&url).json(body).send().await.expect("post");
    assert!(r.status().is_success(), "{url}: {}", r.status());
    let _ = r.bytes().await;
}

async fn run(c: &reqwest::Client, bases: &[String], steps: &[(&str, Value)]) {
    for (path, body) in steps {
        join_all(bases.iter().map(|b| post_ok(c, format!("{b}{path}"), body))).await;
    }
}

struct Setup {
    mocks: Vec<String>,
    router: String,
    _state: Arc<AppState>,
}

async fn setup() -> Setup {
    let mut mocks = Vec::new();
    for _ in 0..2 {
        let args = MockArgs::parse_from(["sglang-mock", "--port", "0", "--speedup", "0"]);
        mocks.push(mock::start(args).await.expect("mock").url);
    }
    let joined = mocks.join(",");
    let cfg = Config::from_sources(
        Cli::parse_from(["router", "--worker-urls", &joined, "--log-level", "error"]),
        FileConfig::default(),
    )
    .expect("config");
    let state = AppState::new(cfg);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let router = format!("http://{}", listener.local_addr().expect("addr"));
    server::register_startup_workers(&state);
    tokio::spawn(server::serve(listener, state.clone()));
    while state.registry.routable().len() < 2 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    Setup {
        mocks,
        router,
        _state: state,
    }
}

fn refit(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let s = rt.block_on(setup());
    let client = reqwest::Client::new();
    let mut g = c.benchmark_group("refit_idle_2_workers");
    let full = steps("abort");
    g.bench_function("direct_sequence", |b| {
        b.to_async(&rt).iter(|| run(&client, &s.mocks, &full))
    });
    let routers = vec![s.router.clone()];
    g.bench_function("router_sequence", |b| {
        b.to_async(&rt).iter(|| run(&client, &routers, &full))
    });
    let direct_pc = vec![full[0].clone(), full[4].clone()];
    g.bench_function("direct_pause_continue", |b| {
        b.to_async(&rt).iter(|| run(&client, &s.mocks, &direct_pc))
    });
    let wait = steps("wait");
    let router_wait = vec![wait[0].clone(), wait[4].clone()];
    g.bench_function("router_pause_wait_continue", |b| {
        b.to_async(&rt)
            .iter(|| run(&client, &routers, &router_wait))
    });
    g.finish();
}

criterion_group!(benches, refit);
criterion_main!(benches);
