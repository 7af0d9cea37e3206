//! Refit failure paths through a router process: a worker failing an update (502 naming it,
//! gate left closed, held requests released by continue), a restarted worker at an old
//! weight version (no traffic until refit), a new worker at another version, per-rid abort,
//! one-worker control calls and admin-key enforcement.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion
#![allow(clippy::disallowed_methods)] // fixtures spawn their own tasks; `Tasks` is the router's

use crate::support;

use std::time::Duration;

use serde_json::json;

use support::http::{client, get, post};
use support::procs::{fast_mock, free_port, mock, mock_on, router_with};
use support::refit::{generate, refit_state};
use support::wait::wait_for;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failing_worker_gives_502_naming_it_and_keeps_the_gate_closed() {
    let a = fast_mock();
    let b = fast_mock();
    let r = router_with(&[&a.url, &b.url], &[]).await;
    let (s, v) = post(&r.url, "/pause_generation", json!({"mode": "abort"})).await;
    assert_eq!(s, 200, "{v}");
    let (s, _) = post(
        &b.url,
        "/mock/fail_next",
        json!({"path": "/update_weights_from_disk"}),
    )
    .await;
    assert_eq!(s, 200);
    let (s, v) = post(
        &r.url,
        "/update_weights_from_disk",
        json!({"model_path": "/models/x", "weight_version": "v2"}),
    )
    .await;
    assert_eq!(s, 502, "{v}");
    assert_eq!(v["success"], false);
    assert_eq!(
        v["failed"],
        json!([[b.url, v["failed_workers"][0]["error"]]]),
        "sgl-router pairs"
    );
    let failed = v["failed_workers"].as_array().expect("failed list");
    assert_eq!(failed.len(), 1, "{v}");
    assert_eq!(failed[0]["url"], b.url.as_str());
    assert!(failed[0]["worker_id"]
        .as_str()
        .is_some_and(|id| !id.is_empty()));
    assert!(v["message"].as_str().expect("message").contains(&b.url));
    let results = v["results"].as_array().expect("results");
    assert_eq!(results.len(), 2);
    assert!(results
        .iter()
        .all(|r| r["url"].is_string() && r["status"].is_number() && r.get("body").is_some()));

    let st = refit_state(&r.url).await;
    assert_eq!(
        st["gate"]["closed"], true,
        "gate stays closed after a failed update: {st}"
    );
    assert_eq!(st["versions_agree"], false, "a got v2, b did not: {st}");

    // A request now is held, not served; continue releases it.
    let url = r.url.clone();
    let held = tokio::spawn(async move { generate(&url, None, 4).await });
    wait_for("request held at the gate", || {
        let u = r.url.clone();
        async move { refit_state(&u).await["gate"]["queued"] == 1 }
    })
    .await;
    assert!(!held.is_finished());
    let (s, v) = post(&r.url, "/continue_generation", json!({})).await;
    assert_eq!(s, 200, "{v}");
    let (status, _, _) = held.await.expect("task");
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_worker_at_an_old_version_gets_no_traffic_until_refit() {
    let a = mock(&["--speedup", "0", "--weight-version", "v1"]);
    let port = free_port();
    let mut b = mock_on(port, &["--speedup", "0", "--weight-version", "v1"]);
    let b_url = b.url.clone();
    let r = router_with(&[&a.url, &b_url], &[]).await;
    let (s, v) = post(
        &r.url,
        "/update_weight_version",
        json!({"new_version": "v2"}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(refit_state(&r.url).await["weight_version"], "v2");

    // b restarts behind the same URL at the old version.
    b.kill();
    // A real restart takes seconds: the router sees the worker go away first.
    wait_for("router notices b is down", || {
        let u = r.url.clone();
        let bu = b_url.clone();
        async move {
            let st = refit_state(&u).await;
            st["workers"].as_array().is_some_and(|ws| {
                ws.iter()
                    .any(|w| w["url"] == bu.as_str() && w["healthy"] == false)
            })
        }
    })
    .await;
    let _b2 = mock_on(port, &["--speedup", "0", "--weight-version", "v1"]);
    wait_for("restart detected and worker held", || {
        let u = r.url.clone();
        let bu = b_url.clone();
        async move {
            let st = refit_state(&u).await;
            st["workers"].as_array().is_some_and(|ws| {
                ws.iter().any(|w| {
                    w["url"] == bu.as_str()
                        && w["awaiting_refit"] == true
                        && w["healthy"] == true
                        && w["incarnation"].as_u64() >= Some(1)
                })
            })
        }
    })
    .await;
    for _ in 0..20 {
        let (s, worker, version) = generate(&r.url, None, 2).await;
        assert_eq!(s, 200);
        assert_eq!(worker, a.url, "the held worker got traffic");
        assert_eq!(version.as_deref(), Some("v2"));
    }
    // Refit through the router brings it level; then it serves again.
    let (s, v) = post(
        &r.url,
        "/update_weights_from_disk",
        json!({"model_path": "/m", "weight_version": "v3"}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let st = refit_state(&r.url).await;
    assert_eq!(st["versions_agree"], true, "{st}");
    assert!(st["workers"]
        .as_array()
        .expect("ws")
        .iter()
        .all(|w| w["awaiting_refit"] == false));
    let mut served_by_b = false;
    for _ in 0..20 {
        let (_, worker, _) = generate(&r.url, None, 2).await;
        served_by_b |= worker == b_url;
    }
    assert!(served_by_b, "b serves again after the refit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_worker_at_another_version_is_held_unless_allowed() {
    let a = mock(&["--speedup", "0", "--weight-version", "v5"]);
    let late = mock(&["--speedup", "0", "--weight-version", "v4"]);
    for (extra, held) in [(&[][..], true), (&["--allow-version-mismatch"][..], false)] {
        let r = router_with(&[&a.url], extra).await;
        let (s, _) = post(&r.url, "/workers", json!({"url": late.url})).await;
        assert_eq!(s, 202);
        wait_for("late worker registered", || {
            let u = r.url.clone();
            async move {
                refit_state(&u).await["workers"]
                    .as_array()
                    .is_some_and(|w| w.len() == 2)
            }
        })
        .await;
        let st = refit_state(&r.url).await;
        let w = st["workers"]
            .as_array()
            .expect("workers")
            .iter()
            .find(|w| w["url"] == late.url.as_str())
            .cloned()
            .expect("late worker");
        assert_eq!(w["awaiting_refit"], held, "{extra:?}: {w}");
        assert_eq!(w["routable"], !held);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_by_rid_reaches_only_the_holder() {
    // Slow decoding so the request is still running when the abort arrives.
    let a = mock(&["--speedup", "1"]);
    let b = mock(&["--speedup", "1"]);
    let r = router_with(&[&a.url, &b.url], &[]).await;
    let url = r.url.clone();
    let running = tokio::spawn(async move { generate(&url, Some("rid-abort-1"), 100_000).await });
    wait_for("rid tracked", || {
        let u = r.url.clone();
        async move { refit_state(&u).await["in_flight_rids"] == 1 }
    })
    .await;
    // The router tracks the rid at dispatch; wait until the worker itself has the request too,
    // or the abort could arrive first and find nothing to abort.
    wait_for("request running on a worker", || {
        let (ua, ub) = (a.url.clone(), b.url.clone());
        async move {
            let mut queued = 0;
            for u in [ua, ub] {
                let (_, st) = get(&u, "/mock/state").await;
                for rank in st["ranks"].as_array().into_iter().flatten() {
                    queued += rank["running"].as_u64().unwrap_or(0)
                        + rank["waiting"].as_u64().unwrap_or(0);
                }
            }
            queued >= 1
        }
    })
    .await;
    let (s, v) = post(&r.url, "/abort_request", json!({"rid": "rid-abort-1"})).await;
    assert_eq!(s, 200, "{v}");
    let results = v["results"].as_array().expect("results");
    assert_eq!(results.len(), 1, "sent to one worker only: {v}");
    let (status, worker, _) = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("aborted request ends")
        .expect("task");
    assert_eq!(status, 200);
    assert_eq!(
        results[0]["url"],
        worker.as_str(),
        "the holder got the abort"
    );
    wait_for("rid forgotten", || {
        let u = r.url.clone();
        async move { refit_state(&u).await["in_flight_rids"] == 0 }
    })
    .await;
    // Unknown rid: nothing to call, SGLang-style 200.
    let (s, v) = post(&r.url, "/abort_request", json!({"rid": "nope"})).await;
    assert_eq!((s, v["total"].as_u64()), (200, Some(0)), "{v}");
    // Bad bodies are 400s naming the problem.
    let (s, v) = post(&r.url, "/abort_request", json!({})).await;
    assert_eq!(s, 400, "{v}");
    let (s, v) = post(&r.url, "/pause_generation", json!({"mode": "nap"})).await;
    assert_eq!(s, 400, "{v}");
    assert_eq!(
        refit_state(&r.url).await["gate"]["closed"],
        false,
        "a refused pause closes nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_calls_and_admin_key() {
    let a = fast_mock();
    let b = fast_mock();
    let joined = format!("{},{}", a.url, b.url);
    let r = support::procs::start_router(&["--worker-urls", &joined, "--admin-api-key", "sekret"]);
    wait_for("both workers routable", || {
        let u = r.url.clone();
        async move {
            let st: serde_json::Value = match client()
                .get(format!("{u}/refit/state"))
                .bearer_auth("sekret")
                .send()
                .await
            {
                Ok(resp) => resp.json().await.unwrap_or_default(),
                Err(_) => return false,
            };
            st["workers"]
                .as_array()
                .is_some_and(|ws| ws.len() == 2 && ws.iter().all(|w| w["routable"] == true))
        }
    })
    .await;
    let (s, _) = post(&r.url, "/flush_cache", json!({})).await;
    assert_eq!(s, 401, "admin routes need the key");
    let (s, _) = get(&r.url, "/refit/state").await;
    assert_eq!(s, 401);
    let authed = |path: &str| {
        client()
            .post(format!("{}{path}", r.url))
            .bearer_auth("sekret")
            .json(&json!({"model_path": "/m", "weight_version": "w9"}))
    };
    let workers: serde_json::Value = client()
        .get(format!("{}/workers", r.url))
        .bearer_auth("sekret")
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    let id_a = workers["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .find(|w| w["url"] == a.url.as_str())
        .and_then(|w| w["id"].as_str())
        .expect("a's id")
        .to_string();
    let resp = authed(&format!("/workers/{id_a}/update_weights_from_disk"))
        .send()
        .await
        .expect("one-worker call");
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(body["success"], true, "the worker's own body: {body}");
    let (_, ia) = get(&a.url, "/model_info").await;
    let (_, ib) = get(&b.url, "/model_info").await;
    assert_eq!(
        (ia["weight_version"].as_str(), ib["weight_version"].as_str()),
        (Some("w9"), Some("default"))
    );
    let resp = authed("/workers/nope/flush_cache")
        .send()
        .await
        .expect("call");
    assert_eq!(resp.status(), 404);
}
