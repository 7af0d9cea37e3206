//! Response bodies and shapes: a full or server-sent-event body type, JSON/text helpers
//! and SGLang's two error shapes (native `{"error":{"message"}}` and OpenAI's
//! `{"object":"error","message","type","param","code"}`).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{header, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::mock::engine::Reply;

/// Turns engine replies into SSE chunks; returns true once the stream is complete.
pub trait SseFormatter: Send + 'static {
    fn on_reply(&mut self, reply: Reply, out: &mut VecDeque<Bytes>) -> bool;
}

/// Body of every mock response.
pub enum MockBody {
    Full(Option<Bytes>),
    Sse(Box<SseBody>),
}

/// A streaming body driven directly by the engine's reply channel (no extra task):
/// dropping it (client gone) closes the channel, which aborts the requests.
pub struct SseBody {
    rx: mpsc::UnboundedReceiver<Reply>,
    fmt: Box<dyn SseFormatter>,
    queue: VecDeque<Bytes>,
    finished: bool,
}

impl SseBody {
    pub fn new(
        rx: mpsc::UnboundedReceiver<Reply>,
        fmt: Box<dyn SseFormatter>,
        first: Vec<Bytes>,
    ) -> SseBody {
        SseBody {
            rx,
            fmt,
            queue: first.into(),
            finished: false,
        }
    }
}

const DONE: &[u8] = b"data: [DONE]\n\n";

impl Body for MockBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            MockBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            MockBody::Sse(s) => loop {
                if let Some(b) = s.queue.pop_front() {
                    return Poll::Ready(Some(Ok(Frame::data(b))));
                }
                if s.finished {
                    return Poll::Ready(None);
                }
                match s.rx.poll_recv(cx) {
                    Poll::Ready(Some(reply)) => {
                        if s.fmt.on_reply(reply, &mut s.queue) {
                            s.queue.push_back(Bytes::from_static(DONE));
                            s.finished = true;
                        }
                    }
                    Poll::Ready(None) => {
                        s.queue.push_back(Bytes::from_static(DONE));
                        s.finished = true;
                    }
                    Poll::Pending => return Poll::Pending,
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, MockBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            MockBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            MockBody::Full(None) => SizeHint::with_exact(0),
            MockBody::Sse(_) => SizeHint::default(),
        }
    }
}

/// The response type of every handler.
pub type Resp = Response<MockBody>;

fn build(status: StatusCode, content_type: &'static str, body: MockBody) -> Resp {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    r
}

/// A JSON response.
pub fn json(status: StatusCode, v: &Value) -> Resp {
    let bytes = serde_json::to_vec(v).unwrap_or_default();
    build(
        status,
        "application/json",
        MockBody::Full(Some(Bytes::from(bytes))),
    )
}

/// A 200 JSON response.
pub fn ok(v: &Value) -> Resp {
    json(StatusCode::OK, v)
}

/// A plain-text response.
pub fn text(status: StatusCode, s: impl Into<Bytes>) -> Resp {
    build(
        status,
        "text/plain; charset=utf-8",
        MockBody::Full(Some(s.into())),
    )
}

/// An empty response.
pub fn empty(status: StatusCode) -> Resp {
    let mut r = Response::new(MockBody::Full(None));
    *r.status_mut() = status;
    r
}

/// A `text/event-stream` response.
pub fn sse(body: SseBody) -> Resp {
    let mut r = build(
        StatusCode::OK,
        "text/event-stream",
        MockBody::Sse(Box::new(body)),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    r
}

/// SGLang's native error shape: `{"error":{"message":...}}`.
pub fn native_error(status: StatusCode, message: impl Into<String>) -> Resp {
    json(status, &json!({"error": {"message": message.into()}}))
}

/// The OpenAI-compatible error shape.
pub fn openai_error(status: StatusCode, message: impl Into<String>) -> Resp {
    let kind = match status {
        StatusCode::NOT_FOUND => "NotFoundError",
        StatusCode::UNAUTHORIZED => "AuthenticationError",
        s if s.is_server_error() => "InternalServerError",
        _ => "BadRequestError",
    };
    json(
        status,
        &json!({"object": "error", "message": message.into(), "type": kind, "param": null, "code": status.as_u16()}),
    )
}

/// Frames one SSE event.
pub fn sse_event(v: &Value) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(b"data: ");
    let _ = serde_json::to_writer(&mut buf, v);
    buf.extend_from_slice(b"\n\n");
    Bytes::from(buf)
}

/// An HTTP status from a `Reply::Failed` code (500 when the code is not a status).
pub fn status_of(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// The SSE error event SGLang's stream handlers send when a request fails mid-stream
/// (`entrypoints/http_server.py` `stream_results`: `{"error": {"message", ...}}`).
pub fn sse_error(code: u16, message: &str) -> Bytes {
    sse_event(&json!({"error": {"message": message, "code": code}}))
}
