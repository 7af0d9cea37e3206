//! The response body type of every route, and small constructors for router-made responses.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::{Either, Full};

use crate::proxy::RelayBody;

/// A router-made body (`Full`) or a relayed worker body (`RelayBody`), without boxing.
pub(crate) type RouterBody = Either<Full<Bytes>, RelayBody>;

/// A complete in-memory body.
pub(crate) fn full(bytes: impl Into<Bytes>) -> RouterBody {
    Either::Left(Full::new(bytes.into()))
}

/// `status` with a JSON body.
pub(crate) fn json(status: StatusCode, value: &serde_json::Value) -> Response<RouterBody> {
    with_type(status, value.to_string(), "application/json")
}

/// `status` with a body of `content_type`.
pub(crate) fn with_type(
    status: StatusCode,
    body: impl Into<Bytes>,
    content_type: &'static str,
) -> Response<RouterBody> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// `status` with a plain-text body.
pub(crate) fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<RouterBody> {
    with_type(status, body, "text/plain; charset=utf-8")
}
