//! Router endpoints and the three generations of the worker-management API, against real
//! `sglang-mock` workers.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use serde_json::{json, Value};
use support::admin::*;
use support::http::{client, get, post_json, status_of};
use support::procs::*;
use support::wait::wait_for;

/// One small `/generate` through `router`, which must answer 200.
async fn generate_one(c: &reqwest::Client, router: &str) {
    let body = json!({"text":"x","sampling_params":{"max_new_tokens":1}});
    let resp = post_json(c, &format!("{router}/generate"), &body).await;
    assert_eq!(resp.status(), 200);
}

fn enc(url: &str) -> String {
    url::form_urlencoded::byte_serialize(url.as_bytes()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_api_registers_lists_and_removes_workers() {
    let m = fast_mock();
    let r = start_router(&[]);
    let c = client();
    assert_eq!(status_of(c.get(format!("{}/health", r.url))).await, 200);
    let (status, v) = get(&r.url, "/readiness").await;
    assert_eq!(status, 503, "not ready without workers: {v}");
    assert_eq!(
        status_of(c.get(format!("{}/health_generate", r.url))).await,
        503
    );
    assert_eq!(
        status_of(
            c.post(format!("{}/generate", r.url))
                .json(&json!({"text":"x"}))
        )
        .await,
        503
    );

    // 0.3: POST /workers -> 202 + worker_id + Location.
    let resp = post_json(
        &c,
        &format!("{}/workers", r.url),
        &json!({"url": m.url, "worker_type": "regular", "labels": {"a": "b"}}),
    )
    .await;
    assert_eq!(resp.status(), 202);
    let id = {
        let loc = resp.headers()["location"].to_str().unwrap().to_string();
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["status"], "accepted");
        let id = v["worker_id"].as_str().unwrap().to_string();
        assert_eq!(loc, format!("/workers/{id}"));
        id
    };
    wait_healthy_count(&r.url, 1).await;
    assert_eq!(status_of(c.get(format!("{}/liveness", r.url))).await, 200);
    assert_eq!(
        status_of(c.get(format!("{}/health_generate", r.url))).await,
        200
    );
    let (status, v) = get(&r.url, "/readiness").await;
    assert_eq!((status, v["healthy_workers"].as_u64()), (200, Some(1)));
    let list = workers(&r.url).await;
    assert_eq!(list["total"], 1);
    let w = &list["workers"][0];
    assert_eq!(w["id"], id.as_str());
    assert_eq!(w["url"], m.url.as_str());
    assert_eq!(w["is_healthy"], true);
    assert!(w["load"].is_number(), "{w}");
    let (status, one) = get(&r.url, &format!("/workers/{id}")).await;
    assert_eq!((status, one["url"].as_str()), (200, Some(m.url.as_str())));
    let (status, _) = get(&r.url, "/workers/not-a-worker").await;
    assert_eq!(status, 404);

    // 0.3: DELETE /workers/{id}.
    let resp = c
        .delete(format!("{}/workers/{id}", r.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let ru = r.url.clone();
    wait_for("worker removed", || {
        let ru = ru.clone();
        async move { workers(&ru).await["total"] == 0 }
    })
    .await;

    // 0.2: DELETE /workers/{urlencoded url}.
    let resp = post_json(&c, &format!("{}/workers", r.url), &json!({"url": m.url})).await;
    assert_eq!(resp.status(), 202);
    wait_healthy_count(&r.url, 1).await;
    let resp = c
        .delete(format!("{}/workers/{}", r.url, enc(&m.url)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    wait_for("worker removed by url", || {
        let ru = ru.clone();
        async move { workers(&ru).await["total"] == 0 }
    })
    .await;
    let resp = c
        .delete(format!("{}/workers/{}", r.url, enc(&m.url)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_api_adds_lists_and_removes_workers() {
    let m = fast_mock();
    let r = start_router(&[]);
    let c = client();
    let resp = c
        .post(format!("{}/add_worker?url={}", r.url, enc(&m.url)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains(&m.url));
    let (status, v) = get(&r.url, "/list_workers").await;
    assert_eq!((status, v), (200, json!({"urls": [m.url]})));
    generate_one(&c, &r.url).await;
    let resp = c
        .post(format!("{}/remove_worker?url={}", r.url, enc(&m.url)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (_, v) = get(&r.url, "/list_workers").await;
    assert_eq!(v, json!({"urls": []}));
    assert_error(
        c.post(format!("{}/add_worker", r.url)),
        400,
        "missing_worker_url",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_size_mismatch_is_refused() {
    let m = mock(&["--speedup", "0", "--page-size", "32"]);
    let r = start_router(&["--page-size", "16"]);
    let v = assert_error(
        client().post(format!("{}/add_worker?url={}", r.url, enc(&m.url))),
        400,
        "page_size_mismatch",
    )
    .await;
    assert!(
        v["error"]["message"].as_str().unwrap().contains("32"),
        "{v}"
    );
    assert_eq!(workers(&r.url).await["total"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_and_fanout_endpoints() {
    let (a, mut b) = (fast_mock(), fast_mock());
    let r = router_with(&[&a.url, &b.url], &[]).await;
    let c = client();

    let (status, v) = get(&r.url, "/v1/models").await;
    assert_eq!(status, 200);
    assert_eq!(v["object"], "list");
    assert!(v["data"][0]["id"].is_string(), "{v}");

    for path in ["/get_model_info", "/model_info"] {
        let resp = c.get(format!("{}{path}", r.url)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let v: Value = resp.json().await.unwrap();
        assert!(v["model_path"].is_string(), "{path}: {v}");
    }

    let (status, v) = get(&r.url, "/get_server_info").await;
    assert_eq!(status, 200);
    assert_eq!(v["router"]["page_size"], 16);
    assert_eq!(v["workers"].as_array().unwrap().len(), 2);

    let (status, v) = get(&r.url, "/get_loads").await;
    assert_eq!(status, 200);
    assert_eq!(v["total_workers"], 2);
    assert_eq!(v["successful"], 2, "{v}");
    assert!(v["loads"]
        .as_array()
        .unwrap()
        .iter()
        .all(|l| l["load"].as_i64() >= Some(0)));

    let text = support::http::get_text(&c, &format!("{}/engine_metrics", r.url)).await;
    for m in [&a.url, &b.url] {
        assert!(
            text.contains(&format!("worker_addr=\"{m}\"")),
            "{m} missing in {text}"
        );
        // Names as sgl-router 0.3.2 serves them: `sglang:` -> `sglang_` (miles' dashboard).
        assert!(
            text.contains(&format!("sglang_num_running_reqs{{worker_addr=\"{m}\"")),
            "sglang_num_running_reqs for {m} in {text}"
        );
    }
    assert!(!text.contains("sglang:"), "no colon names: {text}");

    generate_one(&c, &r.url).await;
    let metrics = support::http::get_text(&c, &format!("{}/metrics", r.url)).await;
    for name in [
        "kvrouter_requests_total",
        "kvrouter_router_overhead_seconds",
        "kvrouter_request_duration_seconds",
        "kvrouter_worker_in_flight",
        "kvrouter_worker_healthy",
    ] {
        assert!(metrics.contains(name), "{name} missing");
    }

    let resp = c
        .post(format!("{}/flush_cache", r.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["successful"].as_array().unwrap().len(), 2, "{v}");

    // One worker down: the fan-out reports it and the status is not 200.
    b.kill();
    let resp = c
        .post(format!("{}/flush_cache", r.url))
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status(),
        502,
        "refit fan-outs answer 502 on any failure (issue 5)"
    );
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["successful"], json!([a.url]));
    assert_eq!(v["failed"][0][0], b.url.as_str(), "{v}");
}
