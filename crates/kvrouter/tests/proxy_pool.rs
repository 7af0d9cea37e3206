//! The data plane's own upstream connections (`proxy::pool`): sequential requests to one
//! worker reuse one keep-alive connection, and a pooled connection the worker closed while it
//! sat idle is never used for a request: every request still gets the worker's exact bytes.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

mod support;

use bytes::Bytes;
use support::http::client;
use support::procs::*;
use support::stub::*;

const ANSWER: &[u8] = br#"{"text":"pooled","meta_info":{"id":"x"}}"#;

async fn generate(router: &str) -> (u16, Bytes) {
    let resp = client()
        .post(format!("{router}/generate"))
        .header("content-type", "application/json")
        .body(r#"{"input_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}"#)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.bytes().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_requests_share_one_upstream_connection() {
    let stub = Stub::start(Behaviour::Bytes(Bytes::from_static(ANSWER))).await;
    let r = router_with(&[&stub.url], &[]).await;
    for i in 0..20 {
        let (status, body) = generate(&r.url).await;
        assert_eq!((status, &body[..]), (200, ANSWER), "request {i}");
    }
    assert_eq!(stub.received.lock().len(), 20);
    assert_eq!(
        stub.data_connections(),
        1,
        "20 sequential requests, one connection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_the_worker_closed_is_replaced_not_used() {
    let stub = Stub::start(Behaviour::Bytes(Bytes::from_static(ANSWER))).await;
    let r = router_with(&[&stub.url], &[]).await;
    for i in 0..5 {
        let (status, body) = generate(&r.url).await;
        assert_eq!((status, &body[..]), (200, ANSWER), "request {i}");
        // The router's pooled connection is now closed at the worker's end.
        stub.drop_connections().await;
    }
    assert_eq!(
        stub.received.lock().len(),
        5,
        "each request reached the worker once"
    );
    assert_eq!(
        stub.data_connections(),
        5,
        "a fresh connection after each close"
    );
}
