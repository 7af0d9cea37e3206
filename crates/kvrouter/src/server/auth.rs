//! Bearer-token checks for the data plane (`--api-key`) and admin routes (`--admin-api-key`).

use http::{header, HeaderMap, StatusCode};

use super::error::ApiError;

/// Ok when no key is configured or `Authorization: Bearer <key>` matches.
pub fn check(headers: &HeaderMap, key: Option<&str>) -> Result<(), ApiError> {
    let Some(key) = key else { return Ok(()) };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    if given.is_some_and(|g| constant_time_eq(g.as_bytes(), key.as_bytes())) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
            "missing or invalid API key (expected `Authorization: Bearer <key>`)",
        ))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer() {
        let mut h = HeaderMap::new();
        assert!(check(&h, None).is_ok());
        assert!(check(&h, Some("k")).is_err());
        h.insert(header::AUTHORIZATION, "Bearer k".parse().unwrap());
        assert!(check(&h, Some("k")).is_ok());
        assert!(check(&h, Some("kk")).is_err());
    }
}
