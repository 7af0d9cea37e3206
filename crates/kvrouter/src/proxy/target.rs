//! `Target`: where a call to a worker goes and the credentials it carries. Every request the
//! router sends to a worker through the upstream client (data plane, admin fan-outs, refit
//! control calls, aborts, `/engine_metrics`) is built from a `Target`, and [`Target::authorize`]
//! is the one place that puts the worker's `Authorization` on it. The header value is marked
//! sensitive, and neither it nor the credentials it came from appear in logs, metric labels or
//! responses (a `Target` prints only its URL).

use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderValue};

use crate::workers::Worker;

/// A worker's base URL and its `Authorization` value (`Bearer <api_key>`, or `Basic` of the
/// credentials its URL carried), borrowed from the worker.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    /// Base URL without a trailing slash, credential-free.
    pub url: &'a str,
    authorization: Option<&'a HeaderValue>,
}

impl<'a> Target<'a> {
    /// A target with an explicit authorization (tests, callers without a `Worker`).
    pub(crate) fn new(url: &'a str, authorization: Option<&'a HeaderValue>) -> Target<'a> {
        Target { url, authorization }
    }

    /// Sets the worker's `Authorization`, replacing what the client sent when the worker has
    /// credentials; without credentials the headers are left as they are.
    pub(crate) fn authorize(&self, headers: &mut HeaderMap) {
        if let Some(v) = self.authorization {
            headers.insert(AUTHORIZATION, v.clone());
        }
    }

    /// An owned copy for a spawned task.
    pub(crate) fn to_owned(self) -> OwnedTarget {
        OwnedTarget {
            url: self.url.to_string(),
            authorization: self.authorization.cloned(),
        }
    }
}

impl<'a> From<&'a Worker> for Target<'a> {
    fn from(w: &'a Worker) -> Target<'a> {
        Target::new(&w.url, w.authorization_header())
    }
}

impl std::fmt::Debug for Target<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &self.url)
            .field("authorization", &self.authorization.map(|_| "***"))
            .finish()
    }
}

/// [`Target`] owned, for work that outlives the borrow (spawned aborts).
#[derive(Clone)]
pub(crate) struct OwnedTarget {
    url: String,
    authorization: Option<HeaderValue>,
}

impl OwnedTarget {
    /// The borrowed view.
    pub(crate) fn target(&self) -> Target<'_> {
        Target::new(&self.url, self.authorization.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorize_replaces_the_client_header_only_when_the_worker_has_credentials() {
        let key = HeaderValue::from_static("Bearer worker-key");
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer router-key"));
        Target::new("http://w", None).authorize(&mut h);
        assert_eq!(h[AUTHORIZATION], "Bearer router-key");
        Target::new("http://w", Some(&key)).authorize(&mut h);
        assert_eq!(h[AUTHORIZATION], "Bearer worker-key");
        assert_eq!(h.get_all(AUTHORIZATION).iter().count(), 1);
    }

    #[test]
    fn debug_hides_the_credentials() {
        let key = HeaderValue::from_static("Bearer s3cret");
        let t = Target::new("http://w", Some(&key));
        let printed = format!("{t:?}");
        assert!(
            !printed.contains("s3cret") && printed.contains("***"),
            "{printed}"
        );
    }
}
