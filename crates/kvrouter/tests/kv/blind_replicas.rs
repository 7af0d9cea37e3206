//! Blind placements agree across router replicas without any channel between them: two real
//! routers (`--kv-blind-threshold 0.5`) over the same 4 mocks, no NATS and no KV events (the mocks publish none), each
//! seeing only its own bookings. A prompt routed by A first and then by B is cold for B, so B
//! places it by rendezvous hashing of the prompt (`routing/kv/blind.rs`) and must pick A's
//! worker. Router C has the rule off (`--kv-blind-threshold 0`): its ties are broken at
//! random, so it agrees with A on all 8 prompts only with probability 4^-8 (the control that
//! shows the check can fail).
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use support::http::client;
use support::kv::*;
use support::procs;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_routers_send_a_cold_prompt_to_the_same_worker_with_no_nats() {
    let mocks: Vec<_> = (0..4)
        .map(|_| procs::mock(&["--page-size", "4", "--speedup", "0"]))
        .collect();
    let workers: Vec<&str> = mocks.iter().map(|m| m.url.as_str()).collect();
    // B and C list the workers in another order: their local ids differ from A's.
    let reversed: Vec<&str> = workers.iter().rev().copied().collect();
    let on = ["--kv-blind-threshold", "0.5"];
    let a = kv_router(&workers, &on);
    let b = kv_router(&reversed, &on);
    let off = kv_router(&reversed, &["--kv-blind-threshold", "0"]);
    let c = client();
    for r in [&a, &b, &off] {
        wait_units(&c, &r.url, 4).await;
    }
    let mut off_agrees = 0;
    for i in 0..8u32 {
        let ids = prompt(5000 + i, 64);
        let (status, w_a, body) = generate(&c, &a.url, &ids, 2).await;
        assert_eq!(status, 200, "{body}");
        let (status, w_b, body) = generate(&c, &b.url, &ids, 2).await;
        assert_eq!(status, 200, "{body}");
        assert!(w_a.is_some());
        assert_eq!(w_a, w_b, "prompt {i}: replicas disagree on a cold prompt");
        let (status, w_off, body) = generate(&c, &off.url, &ids, 2).await;
        assert_eq!(status, 200, "{body}");
        off_agrees += u32::from(w_off == w_a);
    }
    assert!(
        off_agrees < 8,
        "the random tie-break agreed on every prompt"
    );
}
