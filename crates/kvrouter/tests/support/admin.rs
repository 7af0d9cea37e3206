//! The router's admin view as the tests read it: `/workers`, healthy counts, and the
//! shape of router-made error bodies.

use serde_json::Value;

use super::http::client;
use super::wait::wait_for;

/// `GET {router}/workers` as JSON.
pub async fn workers(router: &str) -> Value {
    client()
        .get(format!("{router}/workers"))
        .send()
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

/// Asserts a router-made error body has the `{"error":{"message","type","code"}}` shape.
pub fn assert_error_shape(v: &Value, code: &str) {
    let e = &v["error"];
    assert!(e["message"].is_string(), "message in {v}");
    assert!(e["type"].is_string(), "type in {v}");
    assert_eq!(e["code"], code, "code in {v}");
}
