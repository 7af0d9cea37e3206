//! HTTP/1.1 client for one exchange: POST a JSON body, time the first SSE data
//! chunk and the end, and fold the response into a `ResponseInfo`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;

use super::response::{parse_body, ResponseInfo, StreamFold};
use super::sse::SseParser;

/// Response header through which the router names the worker that served a request.
pub const WORKER_HEADER: &str = "x-kvrouter-worker";
/// Request header miles uses for session stickiness.
pub const ROUTING_KEY_HEADER: &str = "x-smg-routing-key";

/// A pooled keep-alive client shared by all requests of a run.
#[derive(Clone)]
pub struct HttpClient {
    inner: Client<HttpConnector, Full<Bytes>>,
    authorization: Option<HeaderValue>,
}

/// What came back from one exchange.
#[derive(Debug)]
pub struct Exchange {
    pub status: StatusCode,
    /// Value of `x-kvrouter-worker`, if the endpoint set it.
    pub worker: Option<String>,
    /// Time to the first SSE data chunk (streams only).
    pub ttft: Option<Duration>,
    pub info: ResponseInfo,
}

/// A transport-level failure (connection refused, reset, bad header value, ...).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid request: {0}")]
    Request(String),
    #[error("transport: {0}")]
    Transport(String),
}

impl HttpClient {
    /// A client that sends `Authorization: Bearer <api_key>` when a key is given.
    pub fn new(api_key: Option<&str>) -> Result<HttpClient, ClientError> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let inner = Client::builder(TokioExecutor::new())
            // Below the shortest server keep-alive it talks to (SGLang's and the mock's 5 s;
            // the router's is longer): a connection reused as the server closes it fails.
            .pool_idle_timeout(Duration::from_secs(4))
            .build(connector);
        let authorization = api_key
            .map(|k| HeaderValue::from_str(&format!("Bearer {k}")))
            .transpose()
            .map_err(|e| ClientError::Request(format!("api key: {e}")))?;
        Ok(HttpClient {
            inner,
            authorization,
        })
    }

    /// POSTs `body` to `uri` and reads the whole response (SSE when the server streams).
    pub async fn post(
        &self,
        uri: &str,
        body: Vec<u8>,
        routing_key: Option<&str>,
    ) -> Result<Exchange, ClientError> {
        let mut req = Request::post(uri)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream");
        if let Some(auth) = &self.authorization {
            req = req.header(header::AUTHORIZATION, auth.clone());
        }
        if let Some(key) = routing_key {
            req = req.header(ROUTING_KEY_HEADER, key);
        }
        let req = req
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| ClientError::Request(e.to_string()))?;
        let start = Instant::now();
        let resp = self
            .inner
            .request(req)
            .await
            .map_err(|e| ClientError::Transport(error_chain(&e)))?;
        let status = resp.status();
        let worker = resp
            .headers()
            .get(WORKER_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let is_sse = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        let mut body = resp.into_body();
        if !is_sse {
            let bytes = body
                .collect()
                .await
                .map_err(|e| ClientError::Transport(error_chain(&e)))?
                .to_bytes();
            return Ok(Exchange {
                status,
                worker,
                ttft: None,
                info: parse_body(&bytes),
            });
        }
        let mut parser = SseParser::new();
        let mut fold = StreamFold::new();
        let mut ttft = None;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| ClientError::Transport(error_chain(&e)))?;
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            for event in parser.push(&data) {
                if fold.push(&event) && ttft.is_none() {
                    ttft = Some(start.elapsed());
                }
            }
        }
        if let Some(event) = parser.finish() {
            if fold.push(&event) && ttft.is_none() {
                ttft = Some(start.elapsed());
            }
        }
        Ok(Exchange {
            status,
            worker,
            ttft,
            info: fold.finish(),
        })
    }
}

/// `error: cause: cause` — hyper's top-level errors alone say little.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}
