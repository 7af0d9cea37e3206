//! The router's admin view as the tests read it: `/workers`, healthy counts, readiness, and
//! the shape of router-made error bodies.

use serde_json::Value;

use super::http::client;
use super::wait::wait_for;

/// `GET {router}/workers` as JSON.
pub async fn workers(router: &str) -> Value {
    read_workers(client().get(format!("{router}/workers"))).await
}

/// `GET {router}/workers` as JSON, with the admin key `key` as the bearer token.
pub async fn workers_as(router: &str, key: &str) -> Value {
    read_workers(client().get(format!("{router}/workers")).bearer_auth(key)).await
}

async fn read_workers(req: reqwest::RequestBuilder) -> Value {
    req.send()
        .await
        .expect("GET /workers")
        .json()
        .await
        .expect("json")
}

/// Number of workers the router reports healthy.
pub async fn healthy_count(router: &str) -> usize {
    let v = workers(router).await;
    v["workers"]
        .as_array()
        .map(|ws| {
            ws.iter()
                .filter(|w| w["is_healthy"] == true && w["routable"] != false)
                .count()
        })
        .unwrap_or(0)
}

/// Waits until the router reports exactly `n` healthy workers.
pub async fn wait_healthy_count(router: &str, n: usize) {
    let r = router.to_string();
    wait_for(&format!("{n} healthy workers"), || {
        let r = r.clone();
        async move { healthy_count(&r).await == n }
    })
    .await;
}

/// Waits until `GET {router}/readiness` answers 200 (30 s at most); `what` names the wait in
/// the failure.
pub async fn wait_ready(router: &str, what: &str) {
    let r = router.to_string();
    wait_for(what, || {
        let r = r.clone();
        async move {
            client()
                .get(format!("{r}/readiness"))
                .send()
                .await
                .is_ok_and(|resp| resp.status() == 200)
        }
    })
    .await;
}

/// Asserts a router-made error body has the `{"error":{"message","type","code"}}` shape.
pub fn assert_error_shape(v: &Value, code: &str) {
    let e = &v["error"];
    assert!(e["message"].is_string(), "message in {v}");
    assert!(e["type"].is_string(), "type in {v}");
    assert_eq!(e["code"], code, "code in {v}");
}

/// Sends `req` and asserts the answer: `status`, and a router-made error body (see
/// [`assert_error_shape`]) with `code`; returns that body.
pub async fn assert_error(req: reqwest::RequestBuilder, status: u16, code: &str) -> Value {
    let resp = req.send().await.expect("request sent");
    assert_eq!(resp.status(), status);
    let v: Value = resp.json().await.expect("a JSON error body");
    assert_error_shape(&v, code);
    v
}
