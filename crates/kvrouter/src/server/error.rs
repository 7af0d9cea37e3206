//! Router-generated errors: `{"error":{"message","type","code"}}` with a fitting status.

use http::{header, HeaderValue, Response, StatusCode};

use super::body::{full, RouterBody};
use crate::proxy::ForwardError;
use crate::routing::InputError;

/// An error the router answers itself (not a worker's response).
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    /// Stable machine-readable code, e.g. `no_available_workers`.
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }
    pub fn not_found(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, code, message)
    }
    pub fn no_workers() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_available_workers",
            "no healthy worker is available",
        )
    }

    /// The JSON response (`type` is the HTTP reason phrase, as sgl-router does).
    pub fn into_response(self) -> Response<RouterBody> {
        let body = serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.status.canonical_reason().unwrap_or("Error"),
                "code": self.code,
            }
        });
        let mut resp = Response::new(full(body.to_string()));
        *resp.status_mut() = self.status;
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Ok(v) = HeaderValue::from_str(self.code) {
            resp.headers_mut().insert("x-kvrouter-error-code", v);
        }
        resp
    }
}

/// An attempt that got no response head: 503 when the worker could not be reached (nothing
/// was sent), 504 when it did not answer in time, 502 when the exchange broke.
impl From<&ForwardError> for ApiError {
    fn from(e: &ForwardError) -> ApiError {
        let (status, code) = match e {
            ForwardError::Connect { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, "upstream_unavailable")
            }
            ForwardError::Timeout { .. } => (StatusCode::GATEWAY_TIMEOUT, "upstream_timeout"),
            ForwardError::Stalled { .. } => (StatusCode::GATEWAY_TIMEOUT, "upstream_stalled"),
            ForwardError::Io { .. } | ForwardError::BadUrl { .. } => {
                (StatusCode::BAD_GATEWAY, "upstream_request_failed")
            }
        };
        ApiError::new(status, code, e.to_string())
    }
}

impl From<ForwardError> for ApiError {
    fn from(e: ForwardError) -> ApiError {
        ApiError::from(&e)
    }
}

/// A request body the router cannot route: 400.
impl From<InputError> for ApiError {
    fn from(e: InputError) -> ApiError {
        let code = match e {
            InputError::Malformed(_) => "invalid_json",
            InputError::MissingPrompt(_) => "missing_prompt",
            InputError::BadField { .. } => "invalid_field",
        };
        ApiError::bad_request(code, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn forward_errors_keep_their_status_and_code() {
        let url = || "http://w:1".to_string();
        let cases = [
            (
                ForwardError::Connect {
                    url: url(),
                    message: "refused".into(),
                },
                503,
                "upstream_unavailable",
            ),
            (
                ForwardError::Timeout {
                    url: url(),
                    after: Duration::from_millis(300),
                },
                504,
                "upstream_timeout",
            ),
            (
                ForwardError::Io {
                    url: url(),
                    message: "reset".into(),
                },
                502,
                "upstream_request_failed",
            ),
            (
                ForwardError::BadUrl {
                    url: url(),
                    path: "/x".into(),
                },
                502,
                "upstream_request_failed",
            ),
        ];
        for (e, status, code) in cases {
            let message = e.to_string();
            let api = ApiError::from(e);
            assert_eq!((api.status.as_u16(), api.code), (status, code));
            assert_eq!(api.message, message);
        }
    }

    #[test]
    fn input_errors_are_bad_requests() {
        let api = ApiError::from(InputError::Malformed("x".into()));
        assert_eq!(
            (api.status, api.code),
            (StatusCode::BAD_REQUEST, "invalid_json")
        );
        let api = ApiError::from(InputError::MissingPrompt("text"));
        assert_eq!(api.code, "missing_prompt");
    }
}
