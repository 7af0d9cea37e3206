//! Bearer-token checks for the data plane (`--api-key`) and admin routes (`--admin-api-key`),
//! and the admin lock (admin routes refuse on a non-loopback bind without an admin key).

use http::{header, HeaderMap, StatusCode};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use crate::config::Config;

/// Ok when no key is configured or `Authorization: Bearer <key>` matches.
pub(crate) fn check(headers: &HeaderMap, key: Option<&str>) -> Result<(), ApiError> {
    let Some(key) = key else { return Ok(()) };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    if given.is_some_and(|g| keys_match(g.as_bytes(), key.as_bytes())) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
            "missing or invalid API key (expected `Authorization: Bearer <key>`)",
        ))
    }
}

/// Constant-time comparison (`subtle`). On a length mismatch the key is compared with itself
/// so the time depends on the key's length only, never on how much of `given` matched.
fn keys_match(given: &[u8], key: &[u8]) -> bool {
    if given.len() == key.len() {
        bool::from(given.ct_eq(key))
    } else {
        let _ = bool::from(key.ct_eq(key));
        false
    }
}

/// 403 when the admin routes are locked ([`Config::admin_locked`]).
pub(crate) fn admin_lock(config: &Config) -> Result<(), ApiError> {
    if config.admin_locked() {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "admin_locked",
            format!(
                "admin routes are disabled: the router listens on {} (not loopback) without an \
                 admin key; set --admin-api-key or pass --insecure-admin",
                config.server.host
            ),
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Options;

    #[test]
    fn bearer() {
        let mut h = HeaderMap::new();
        assert!(check(&h, None).is_ok());
        assert!(check(&h, Some("k")).is_err());
        h.insert(header::AUTHORIZATION, "Bearer k".parse().unwrap());
        assert!(check(&h, Some("k")).is_ok());
        assert!(check(&h, Some("kk")).is_err());
    }

    fn config(host: &str, f: impl FnOnce(&mut Options)) -> Config {
        let mut o = Options {
            host: host.to_string(),
            ..Options::default()
        };
        f(&mut o);
        Config::from_options(o).unwrap()
    }

    #[test]
    fn lock_applies_to_non_loopback_without_key() {
        for host in ["127.0.0.1", "127.3.2.1", "::1", "localhost"] {
            let c = config(host, |_| {});
            assert!(!c.admin_locked(), "{host}");
            assert!(c.admin_warning().is_none(), "{host}");
        }
        let c = config("0.0.0.0", |_| {});
        assert!(c.admin_locked());
        assert!(admin_lock(&c).is_err());
        assert!(c.admin_warning().unwrap().contains("--insecure-admin"));
        let c = config("::", |o| o.insecure_admin = true);
        assert!(!c.admin_locked());
        assert!(c.admin_warning().is_some());
        let c = config("10.0.0.1", |o| o.admin_api_key = Some("a".into()));
        assert!(!c.admin_locked());
        assert!(c.admin_warning().is_none());
        let c = config("10.0.0.1", |o| o.api_key = Some("k".into()));
        assert!(!c.admin_locked());
        assert_eq!(c.effective_admin_key(), Some("k"));
        assert!(c.admin_warning().unwrap().contains("--admin-api-key"));
    }
}
